"""One module per view; each shows "no data yet" until its data arrives."""
