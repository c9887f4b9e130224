"""DDP412: a `--local_rank` option beside LOCAL_RANK, which torch>=2.0's launcher rejects.

## What it does
Finds an argparse `--local_rank` option (only the underscore spelling) in a script that also reads
the `LOCAL_RANK` environment variable, parsed with `parse_args` (which rejects unknown flags). A
parser that accepts both spellings (`"--local_rank", "--local-rank"`) or uses `parse_known_args` is
left alone. Opt-in (`--extend-select DDP412`): the script works under torchrun, and the labelled
real code disagrees on whether this is a bug (precision about 0.5 there; docs/lint-measurements.md).

## Why is this bad?
torch.distributed.launch, deprecated, passes the rank as a flag: `--local_rank=N` before torch 2.0,
`--local-rank=N` from torch 2.0 on. argparse does not match `--local-rank` to an option declared as
`--local_rank`, so under the old launcher with a current torch the script stops at argument parsing
("unrecognized arguments: --local-rank=0") before it reaches the LOCAL_RANK it also reads.

## Example
```python
parser.add_argument("--local_rank", type=int, default=0)
args = parser.parse_args()
local_rank = int(os.environ.get("LOCAL_RANK", args.local_rank))
```

## Use instead
```python
parser.add_argument("--local_rank", "--local-rank", type=int, default=0)   # both launchers' spellings
```
or drop the option and launch with `torchrun`.
"""

from __future__ import annotations

from ddpdoctor.script.launch_args import FLAGS, local_rank_options, reads_local_rank_env

CODE = "DDP412"
TITLE = "--local_rank option beside LOCAL_RANK"
KIND = "script"
SEVERITY = "info"
CONFIDENCE = "medium"
# why it is not in the default selection (measured with score_lint.py on the labelled sets)
OPT_IN_BECAUSE = (
    "the script works under torchrun, and the labellers of real code disagree: of six such options "
    "in the labelled sets, three are marked bugs (one fixed upstream after a user hit the error) and "
    "three correct, a precision near 0.5, under the 0.95 a default rule needs"
)


def check(m):
    if not reads_local_rank_env(m) or m.method_calls("parse_known_args"):
        return  # (unknown flags ignored: the new spelling passes through)
    for opt in local_rank_options(m):
        if set(FLAGS) <= set(opt.flags) or m.keyword_is(opt.call, "required", True):
            continue  # both spellings accepted; a required option is DDP401's
        yield m.finding(
            CODE,
            opt.flag,
            "`--local_rank` is the spelling of torch<2.0's torch.distributed.launch only: from torch "
            "2.0 that launcher passes `--local-rank=N` (with a hyphen), which this parser rejects "
            "(\"unrecognized arguments\") before LOCAL_RANK, which this script also reads, is used",
            SEVERITY,
            hint="accept both spellings (`add_argument('--local_rank', '--local-rank', ...)`), or drop "
            "the option and launch with torchrun",
        )
