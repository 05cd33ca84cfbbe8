"""Controller role: table configs, segment metadata, ideal state, segment completion (leader only)."""
