"""Stage 1, sources: walking a source root without leaving it (walk.py), checking and decoding
image files (images.py), and the forms pools ship in, read in place (layouts/: folders, per-class
tars, WebDataset shards, Parquet, path lists). Driven by curation/services/sources.py and ingest.py."""
