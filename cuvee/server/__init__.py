"""Server role: consuming and committed segments, state transitions, query execution on local segments."""
