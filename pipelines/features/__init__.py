"""Stage 3, features: the classifiers and their registry, decoding, the CPU runtime, extraction of
top-5 predictions and features, near-duplicate search, exact GPU search, find-similar and the
embedding map. Driven by curation/services/image_pipeline.py, duplicates.py, similar.py and embedding_map.py."""
