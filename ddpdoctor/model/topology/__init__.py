"""One node's hardware topology as data, verdicts on it, and the odd node among several."""
