"""Fleet outputs, pure: drain reasons, monitor exit codes, Prometheus text, Kubernetes labels, report diffs."""
