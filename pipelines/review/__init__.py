"""Stage 4, review: the order a queue serves images in, agreement between annotators (kappa, Wilson
intervals), annotator quality and the certification of a clean set from a sample of reviews.
Driven by curation/services/review.py, review_stats.py and certification.py."""
