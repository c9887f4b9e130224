"""Pure analysis by domain (no torch, no terminal, no I/O): what measurements and facts mean."""
