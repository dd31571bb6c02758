"""``serve``: the same core as the one-shot verbs, run continuously by a watch loop."""
