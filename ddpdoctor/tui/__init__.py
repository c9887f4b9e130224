"""The Textual app (`ddpdoctor tui`): reads events and reports only, never measures by itself."""
