"""DDP101 leaves a loader factory named for an evaluation split alone (it needs no reshuffling)."""

from ddpdoctor.script.analysis import names_eval_split


def test_evaluation_factories_by_name():
    for name in ("get_eval_data_loader", "get_test_data_loader", "build_val_loader", "valid_dataloader"):
        assert names_eval_split(name), name
    for name in ("get_train_data_loader", "get_data_loader", "create_dataloader", "train_val_loader"):
        assert not names_eval_split(name), name
