"""Hardware profiles: their schema, which one fits a report, and measurements judged against it."""
