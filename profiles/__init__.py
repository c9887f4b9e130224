"""YAML profiles (hardware baselines and suites). Installed as ``ddpdoctor.profiles``."""
