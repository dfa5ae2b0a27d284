"""Stage 2, classes: WordNet 3.0 and its noun graph, naming class folders as synsets (folders.py),
the class filter's rules and policy (filter/), semantic distance and splits, class search and
ImageNet's class lists. Driven by curation/services/class_filter.py, sources.py and id_classes.py."""
