"""Self-evolution: sources and folds, the proposer, MSV admission, CrossFit scoring, the loop."""
