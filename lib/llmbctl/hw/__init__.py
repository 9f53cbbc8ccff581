"""Controller-side hardware work: checked parsing of captures (check) and facts from a bundle (facts)."""
