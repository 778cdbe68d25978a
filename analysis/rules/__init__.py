"""One module per rule; ``analysis.registry.all_rules`` discovers them."""
