"""Put on PYTHONPATH by `ddpdoctor watch` (this directory holds nothing else): starts the in-rank
helper in the job's ranks, then hands over to whatever sitecustomize would have run without us."""

import os
import sys


def _chain_to_the_real_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    me = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import sitecustomize  # noqa: F401 - the next one on the path, if any
    except ImportError:
        pass
    except Exception as e:  # noqa: BLE001 - theirs failed: say so as Python would, keep going
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}",
              file=sys.stderr)
    finally:
        sys.path[:] = saved
        if me is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = me


def _start_agent():
    if not os.environ.get("DDPDOCTOR_WATCH_RUN"):
        return
    try:
        try:
            from ddpdoctor.runtime import rank_agent
        except ImportError:  # ddpdoctor not installed for this interpreter: use the copy we came from
            sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
            from ddpdoctor.runtime import rank_agent
        rank_agent.activate()
    except Exception as e:  # noqa: BLE001 - never stop the user's program
        print(f"ddpdoctor watch: in-rank helper not started: {type(e).__name__}: {e}", file=sys.stderr)


_start_agent()
_chain_to_the_real_sitecustomize()
