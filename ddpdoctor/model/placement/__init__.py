"""Process-group placement: islands, rings, device meshes, layouts and the code that builds them."""
