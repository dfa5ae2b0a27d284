"""The computation, framework-free (no Django, Celery or the apps), one package per stage in the
flow's order: sources -> classes -> features -> review -> export -> evaluation. A stage imports
only the stages before it (``.importlinter``, contract ``stages``) and the two shared rules at
the top: ``names.py`` (names from users, paths that stay in their root) and ``numbers.py``
(integers and comma lists from users). The services in curation/services/ drive each stage."""
