"""Which names a loop body derives from the rank's own batch items (ddpdoctor.script.writers): a path
built from them names each rank's own files, a path built from anything else is shared."""

import ast
import textwrap

from ddpdoctor.script.writers import _derived_in

LOOP = textwrap.dedent(
    """
    for i, (inp, names) in enumerate(loader):
        self.last = model(inp)
        scene = names[0]
        out, (a, *rest) = join(root, scene), split(scene)
        cache[i] = inp
        path = join(root, f"sample{i}", f"epoch{self.epoch}.png")
    """
)


def test_names_bound_from_the_items_and_not_the_objects_set():
    loop = ast.parse(LOOP).body[0]
    derived = _derived_in(loop, {"inp", "names"})
    assert {"scene", "out", "a", "rest"} <= derived
    # `self.last = ...` and `cache[i] = ...` set something on an object: they bind no `self`/`cache`,
    # so a path made of `self.epoch` and the step count stays one shared path
    assert not derived & {"self", "cache", "i", "path"}
