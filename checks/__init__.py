"""The checks, one per module. Installed as ``ddpdoctor.checks``; see ddpdoctor/registry.py."""
