"""The report read and written as JSON, and rendered: text, JUnit, topology and hang views (its types: core)."""
