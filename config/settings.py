"""Countersign's only settings module.

Every value that differs between a laptop, CI and production comes from an environment variable with
a safe default for the embedded run (``make run``); ``.env.example`` lists them. Nothing else in the
project reads the environment at import time.
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
from django.conf import global_settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP
from django.utils.module_loading import import_string

from config.channel_layers import channel_layers

BASE_DIR = Path(__file__).resolve().parent.parent


def _env(name: str, default: str) -> str:
    """The variable's value; unset and blank both mean the default (so `.env.example` can list blanks)."""
    return os.environ.get(name, "").strip() or default


def _env_bool(name: str, default: bool) -> bool:
    return _env(name, str(default)).lower() in {"1", "true", "yes", "on"}


def _env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in _env(name, default).split(",") if item.strip()]


# --- Core -------------------------------------------------------------------------------------------

# The default is public, for local development only: with DEBUG off the servers refuse to start with
# it and `check --deploy` fails on it (approvals/checks.py). Set SECRET_KEY anywhere else.
SECRET_KEY = _env("SECRET_KEY", "django-insecure-countersign-dev-only-change-me")
# Off unless asked for: the debug page shows settings (DATABASE_URL among them). `make run` turns it on.
DEBUG = _env_bool("DEBUG", default=False)
ALLOWED_HOSTS = _env_list("ALLOWED_HOSTS", "127.0.0.1,localhost")

INSTALLED_APPS = [
    # First, so that `runserver` is Daphne's and serves websockets too.
    "daphne",
    # django.contrib.admin, with a site that opens to the Admins group (approvals/admin.py).
    "approvals.apps.CountersignAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "django_tasks_db",
    "axes",
    "approvals",
]


class Middleware(list[str]):
    """``MIDDLEWARE``, in which ``path in MIDDLEWARE`` also finds a subclass of the class ``path`` names.

    Django's deploy checks look for the security, CSRF and X-Frame-Options middlewares by their dotted
    names, and skip the checks of their settings (HSTS, the HTTPS redirect, the CSRF cookie...) when
    the name is absent; its admin checks already accept a subclass. The loop versions listed below
    are subclasses of Django's, and their settings stay checked.
    """

    def __contains__(self, path: object) -> bool:
        if super().__contains__(path):
            return True
        if not isinstance(path, str):
            return False
        try:
            wanted = import_string(path)
        except ImportError:
            return False
        listed = (import_string(entry) for entry in self)
        return any(isinstance(entry, type) and issubclass(entry, wanted) for entry in listed)


MIDDLEWARE = Middleware(
    [
        # Django's own, as approvals.server.loop_middleware's subclasses: under ASGI their hooks run on
        # the event loop when they do no I/O.
        "approvals.server.loop_middleware.SecurityMiddleware",
        # A read the database dropped runs again; otherwise 503 with Retry-After (approvals/middleware.py).
        "approvals.middleware.DatabaseOutageMiddleware",
        "approvals.server.loop_middleware.SessionMiddleware",
        "approvals.server.loop_middleware.CommonMiddleware",
        "approvals.server.loop_middleware.CsrfViewMiddleware",
        "approvals.server.loop_middleware.AuthenticationMiddleware",
        "approvals.server.loop_middleware.MessageMiddleware",
        "approvals.server.loop_middleware.XFrameOptionsMiddleware",
        "django_htmx.middleware.HtmxMiddleware",
        "approvals.middleware.htmx_login_redirect",
        "approvals.middleware.private_pages",
        # Times in the viewer's zone (approvals/times.py).
        "approvals.middleware.viewer_time_zone",
        # The address pages are served at: links in messages without COUNTERSIGN_BASE_URL (approvals/site.py).
        "approvals.middleware.served_address",
        "approvals.server.loop_middleware.ContentSecurityPolicyMiddleware",
        # Last, as django-axes asks: it turns a locked-out login into its 429 page.
        "axes.middleware.AxesMiddleware",
    ]
)

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

# Django's form renderer, its plain inputs and selects written without their templates
# (approvals/server/widgets.py).
FORM_RENDERER = "approvals.server.widgets.FormRenderer"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.csp",
            ],
        },
    },
]

# --- Database ---------------------------------------------------------------------------------------

_default_sqlite = BASE_DIR / "var" / "countersign.sqlite3"
DATABASE_URL = _env("DATABASE_URL", f"sqlite:///{_default_sqlite}")


def _database_for(url: str) -> dict[str, Any]:
    database: dict[str, Any] = dict(dj_database_url.parse(url, conn_max_age=0))
    if database["ENGINE"] == "django.db.backends.sqlite3":
        if database["NAME"] and database["NAME"] != ":memory:":
            Path(database["NAME"]).parent.mkdir(parents=True, exist_ok=True)
        database["OPTIONS"] = {
            # IMMEDIATE takes the write lock at BEGIN, so concurrent writers wait for the busy timeout
            # instead of failing to upgrade a read lock halfway through (DEFERRED lost writes in a trial).
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            **database.get("OPTIONS", {}),
        }
        # A thread keeps its SQLite connection (a file handle, no server slot to give back): opening
        # one, its pragmas and Django's SQL functions, costs several times a short query, and the
        # live relay and the sweep ask many times a second. Closed when unusable, as any connection.
        database["CONN_MAX_AGE"] = None
    elif database["ENGINE"] == "django.db.backends.postgresql":
        # psycopg 3's pool replaces persistent connections; Django refuses both at once. A request uses
        # one connection at a time (approvals/server/database.py), so max_size is how many of this process's
        # requests reach the database at once; the others wait up to `timeout` seconds for a connection,
        # then fail with a PoolTimeout that is logged with the pool's figures (approvals/server/database.py).
        # Size it so that every process's max_size together stays under the server's max_connections.
        from config.database import check_connection

        pool_max = max(1, int(_env("DATABASE_POOL_MAX_SIZE", "10")))
        database["OPTIONS"] = {
            "pool": {
                "min_size": min(2, pool_max),
                "max_size": pool_max,
                "timeout": float(_env("DATABASE_POOL_TIMEOUT", "10")),
                # Checked when handed out: a connection the server dropped (restart, failover) is
                # replaced instead of failing the request that gets it.
                "check": check_connection,
            },
            **database.get("OPTIONS", {}),
        }
        database["CONN_MAX_AGE"] = 0
        # Django's backend with our pool class (approvals/server/database.py): a request learns within
        # DATABASE_UNREACHABLE_SECONDS that the server cannot be reached, instead of waiting out
        # `timeout`, which is for a busy pool.
        database["ENGINE"] = "approvals.server.postgresql"
        # A connection attempt to a server that does not answer gives up after this (psycopg: 130 s),
        # freeing the pool's worker for the next attempt.
        database["OPTIONS"].setdefault("connect_timeout", int(_env("DATABASE_CONNECT_TIMEOUT", "5")))
    return database


DATABASES = {"default": _database_for(DATABASE_URL)}
# A read replica of the primary (PostgreSQL streaming replication) that the run store's listings
# read from (approvals/store.py, listings): the inbox pages, the API's and the runtime's listings.
# Everything else, decisions first, reads and writes the primary, and a decision on a run a lagging
# replica still lists is checked there (the card then says it was already decided).
DATABASE_REPLICA_URL = _env("DATABASE_REPLICA_URL", "")
if DATABASE_REPLICA_URL:
    # Never migrated (a replica follows the primary); in tests it stands for the test database.
    DATABASES["replica"] = {**_database_for(DATABASE_REPLICA_URL), "TEST": {"MIRROR": "default"}}
LISTINGS_DATABASE = "replica" if DATABASE_REPLICA_URL else "default"
# The run store's fixed statements are prepared on PostgreSQL (approvals/server/database.py); turn off
# behind a transaction-pooling proxy that cannot keep prepared statements.
DATABASE_PREPARED_STATEMENTS = _env_bool("DATABASE_PREPARED_STATEMENTS", True)
# How long a request waits for a connection the PostgreSQL pool is making before it answers 503
# (the server does not answer); a busy pool's requests wait DATABASE_POOL_TIMEOUT.
DATABASE_UNREACHABLE_SECONDS = float(_env("DATABASE_UNREACHABLE_SECONDS", "1"))
# How often the PostgreSQL pool's figures are logged (INFO, from the end of a request); 0: never.
DATABASE_POOL_STATS_SECONDS = float(_env("DATABASE_POOL_STATS_SECONDS", "60"))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Channels (websockets) -------------------------------------------------------------------------

# The channel layer that carries live updates between processes (config/channel_layers.py). REDIS_URL:
# one Redis URL, or several (separated by commas) over which the layer shards its channels and
# groups. REDIS_SENTINELS (host:port, ...) and REDIS_SENTINEL_MASTER: the master found through
# Sentinel instead (REDIS_URL then gives only the database and the master's login). Neither: the
# in-process layer, fine for the embedded single-process run.
REDIS_URL = _env("REDIS_URL", "")
CHANNEL_LAYERS = channel_layers(
    REDIS_URL,
    sentinels=_env("REDIS_SENTINELS", ""),
    sentinel_master=_env("REDIS_SENTINEL_MASTER", ""),
    sentinel_password=_env("REDIS_SENTINEL_PASSWORD", ""),
)

# Origins besides the site's own from which pages may open the live socket (approvals/live/origins.py).
CSRF_TRUSTED_ORIGINS = _env_list("CSRF_TRUSTED_ORIGINS", "")
LIVE_TRUSTED_ORIGINS = _env_list("LIVE_TRUSTED_ORIGINS", "") or CSRF_TRUSTED_ORIGINS
# How many runs one page's socket may watch at once.
LIVE_MAX_RUN_SUBSCRIPTIONS = int(_env("LIVE_MAX_RUN_SUBSCRIPTIONS", "50"))
# How many frames one page's socket may send in a minute; past it the socket is closed with 1008.
LIVE_MAX_FRAMES_PER_MINUTE = int(_env("LIVE_MAX_FRAMES_PER_MINUTE", "240"))

# How often each server process re-reads the sessions of its open live sockets, all at once
# (approvals/live/sessions.py: a session, a user and a groups query per period, however many sockets):
# a session deleted, expired or of a deactivated user closes its sockets (4401), and a change to which
# agents a user may see reaches theirs. A logout closes the session's sockets at once, not after this.
LIVE_SESSION_CHECK_SECONDS = float(_env("LIVE_SESSION_CHECK_SECONDS", "60"))

# --- Background tasks (django.tasks) ---------------------------------------------------------------

if _env("TASKS_BACKEND", "immediate").lower() == "database":
    # Tasks are stored in the database and run by `manage.py db_worker`.
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
else:
    TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
# Who expires parked calls past their deadline (approvals/tasks.py): "server" (each ASGI server
# process), "worker" (the db_worker) or "off"; empty: the worker with TASKS_BACKEND=database, else
# the server.
EXPIRY_SWEEP = _env("EXPIRY_SWEEP", "").lower()

# --- Agents -----------------------------------------------------------------------------------------

# A pydantic-ai model name (e.g. "openai-chat:llama3.1"); empty means the scripted demo model.
AGENTS_MODEL = _env("AGENTS_MODEL", "")
# "module:attribute" of the agents_runtime.Runtime the dashboard serves.
AGENTS_RUNTIME = _env("AGENTS_RUNTIME", "demo.agents:runtime")
# How long a started resumption may go without renewing its lease before the run is offered for a
# decision again (its process died); a run waiting in the task queue has no lease yet.
RUN_LEASE_SECONDS = int(_env("RUN_LEASE_SECONDS", "300"))
#: How long a reviewer's claim on a call ("I'm on it") holds unless renewed.
CALL_CLAIM_SECONDS = int(_env("CALL_CLAIM_SECONDS", "300"))
#: How long a decision taken in the browser is held before it is taken, so its reviewer can undo
#: it (approvals/services/decisions.py); 0: taken at once.
DECISION_UNDO_SECONDS = int(_env("DECISION_UNDO_SECONDS", "5"))
#: The reviewer's queue counts a call "due soon" when its deadline is at most this far off.
QUEUE_DUE_SOON_SECONDS = int(_env("QUEUE_DUE_SOON_SECONDS", "3600"))
# Days an ended run's record (its transcript) is kept; `manage.py prune_run_records` empties older
# ones (the audit log stays). Unset or 0: kept for good.
RUN_RECORD_RETENTION_DAYS = int(_env("RUN_RECORD_RETENTION_DAYS", "0")) or None

# Every logged-in user sees every agent (small teams); otherwise a group must grant each (access.py).
COUNTERSIGN_OPEN_VISIBILITY = _env_bool("COUNTERSIGN_OPEN_VISIBILITY", default=False)

# --- HTTP API -----------------------------------------------------------------------------------------

# Decisions per API token: "<count>/<seconds>" (a sliding window; "0" turns the limit off). Counted in
# Django's cache: per process with the default local-memory cache, shared when CACHES is shared.
API_DECISION_RATE_LIMIT = _env("API_DECISION_RATE_LIMIT", "120/60")
if not re.fullmatch(r"(0|[1-9][0-9]*)(/[1-9][0-9]*)?", API_DECISION_RATE_LIMIT):
    raise ImproperlyConfigured(
        f"API_DECISION_RATE_LIMIT is {API_DECISION_RATE_LIMIT!r}: write it <count>/<seconds>, e.g. 120/60 "
        "(at most 120 decisions a token in any 60 seconds), or 0 for no limit"
    )
# The longest a decision's stream waits for a background worker's continuation to finish.
API_STREAM_MAX_SECONDS = float(_env("API_STREAM_MAX_SECONDS", "600"))
# Answers one account may keep open while they wait for a person (AG-UI resumes, approval requests'
# long polls, MCP gateway calls); past it a 429. "0": no limit. Counted in Django's cache, as above.
# (At most 1,000: each is a key of the cache a new wait may look at.)
_OPEN_WAITS = _env("API_OPEN_WAITS_PER_CALLER", "32")
if not re.fullmatch(r"0|[1-9][0-9]{0,2}|1000", _OPEN_WAITS):
    raise ImproperlyConfigured(
        f"API_OPEN_WAITS_PER_CALLER is {_OPEN_WAITS!r}: write a count up to 1000, e.g. 32, or 0 for no limit"
    )
API_OPEN_WAITS_PER_CALLER = int(_OPEN_WAITS)

# Webhooks out (approvals/webhooks): each POST's timeout, the waits between attempts, and how long
# after its event a delivery is given up. Links in their bodies (and in notifications) start with
# COUNTERSIGN_BASE_URL; unset, with the address a signed-in browser last loaded a page from (as
# `make run PORT=9000` serves it), else http://localhost:8000 (approvals/site.py).
WEBHOOK_TIMEOUT_SECONDS = float(_env("WEBHOOK_TIMEOUT_SECONDS", "10"))
WEBHOOK_RETRY_SECONDS = [
    float(s) for s in _env_list("WEBHOOK_RETRY_SECONDS", "5,300,1800,7200,18000,36000,36000")
]
WEBHOOK_GIVE_UP_SECONDS = float(_env("WEBHOOK_GIVE_UP_SECONDS", "86400"))
COUNTERSIGN_BASE_URL = _env("COUNTERSIGN_BASE_URL", "")
# Webhook endpoints and chat webhooks may point at this machine or a private network (receivers inside
# it), and chat webhooks may be plain http. Off, such addresses are refused when saved and, resolved,
# when sent to (approvals/outbound/posting.py).
COUNTERSIGN_ALLOW_PRIVATE_WEBHOOKS = _env_bool("COUNTERSIGN_ALLOW_PRIVATE_WEBHOOKS", default=False)

# --- Queue health (approvals/views/probes.py, approvals/health/) ------------------------------------------

# /metrics (Prometheus) answers only a request with "Authorization: Bearer <METRICS_TOKEN>". Unset:
# /metrics is 404, unless DEBUG is on (local development), where it is open.
METRICS_TOKEN = _env("METRICS_TOKEN", "")
# How long /readyz waits for the database and for the channel layer's round trip, each.
READYZ_TIMEOUT_SECONDS = float(_env("READYZ_TIMEOUT_SECONDS", "2"))
# How long the health page and /metrics keep their count of pending calls (Django's cache); 0: never.
HEALTH_PENDING_CACHE_SECONDS = float(_env("HEALTH_PENDING_CACHE_SECONDS", "5"))

# --- Auth -------------------------------------------------------------------------------------------

# Django's hashers, PBKDF2 first as in Django, with at most PASSWORD_HASHING_THREADS hashes at once per
# process (default: half the cores; 0: no bound) so a burst of logins leaves the other cores to the
# people already working (approvals/policy.py).
PASSWORD_HASHERS = [
    "approvals.policy.BoundedPBKDF2PasswordHasher"
    if name == "django.contrib.auth.hashers.PBKDF2PasswordHasher"
    else name
    for name in global_settings.PASSWORD_HASHERS
]
PASSWORD_HASHING_THREADS = int(_env("PASSWORD_HASHING_THREADS", "") or max(1, (os.cpu_count() or 2) // 2))

AUTHENTICATION_BACKENDS = [
    # First: refuses a locked-out login before the password is even checked.
    "axes.backends.AxesStandaloneBackend",
    "approvals.policy.ModelBackend",  # (its permissions in one query)
]

# Login throttling (django-axes): after LOGIN_FAILURE_LIMIT failed logins for one username from one
# address, that pair is refused for LOGIN_COOLOFF_MINUTES. Locking the pair, not the username,
# means an attacker elsewhere cannot lock a named reviewer out, and the cool-off ends every lock.
AXES_FAILURE_LIMIT = int(_env("LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(minutes=float(_env("LOGIN_COOLOFF_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# That page, with Retry-After (approvals/views/sign_in.py).
AXES_LOCKOUT_CALLABLE = "approvals.views.sign_in.locked_out"
# Behind a reverse proxy: how many proxies add themselves to X-Forwarded-For (0: use the peer address).
AXES_IPWARE_PROXY_COUNT = int(_env("PROXY_COUNT", "0")) or None
AXES_IPWARE_META_PRECEDENCE_ORDER = (
    ["HTTP_X_FORWARDED_FOR", "REMOTE_ADDR"] if AXES_IPWARE_PROXY_COUNT else ["REMOTE_ADDR"]
)

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# --- Notifications (approvals/notifications) --------------------------------------------------------

# Mail (Django's mailers): printed to the console unless EMAIL_HOST names an SMTP server.
_email_host = _env("EMAIL_HOST", "")
MAILERS = {
    "default": (
        {
            "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OPTIONS": {
                "host": _email_host,
                "port": int(_env("EMAIL_PORT", "587")),
                "username": _env("EMAIL_HOST_USER", ""),
                "password": _env("EMAIL_HOST_PASSWORD", ""),
                "use_tls": _env_bool("EMAIL_USE_TLS", default=True),
                "timeout": float(_env("EMAIL_TIMEOUT", "10")),
            },
        }
        if _email_host
        else {"BACKEND": "django.core.mail.backends.console.EmailBackend"}
    )
}
DEFAULT_FROM_EMAIL = _env("DEFAULT_FROM_EMAIL", "countersign@localhost")
# Calls parked on one agent within this many seconds of the first make one message.
NOTIFY_COLLAPSE_SECONDS = float(_env("NOTIFY_COLLAPSE_SECONDS", "10"))
# A reminder goes out this long before a call's deadline (0: none).
NOTIFY_REMINDER_BEFORE_SECONDS = float(_env("NOTIFY_REMINDER_BEFORE_SECONDS", "900"))
NOTIFY_RETRY_SECONDS = [float(s) for s in _env_list("NOTIFY_RETRY_SECONDS", "10,60,300,1800,7200")]
NOTIFY_GIVE_UP_SECONDS = float(_env("NOTIFY_GIVE_UP_SECONDS", "21600"))
# Chat webhook URLs must be on one of these hosts when any are named (and https: see
# COUNTERSIGN_ALLOW_PRIVATE_WEBHOOKS).
NOTIFY_CHAT_HOSTS = _env_list("NOTIFY_CHAT_HOSTS", "")

# --- Security headers -------------------------------------------------------------------------------

# No inline script or style and no eval: everything comes from our own origin, and the few tags that
# must be inline carry the per-request nonce. Model output is untrusted, so this is load-bearing.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF, CSP.NONCE],
    "img-src": [CSP.SELF, "data:"],
    # 'self' covers ws:/wss: to the same host and port (CSP Level 3), which is all the live updates use.
    "connect-src": [CSP.SELF],
    "font-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
}
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CONTENT_TYPE_NOSNIFF = True

# Behind a TLS-terminating proxy that sets this header (opt-in: only when the proxy always sets or
# strips it), e.g. SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO=https".
_proxy_header = _env("SECURE_PROXY_SSL_HEADER", "")
if _proxy_header:
    _name, _, _value = _proxy_header.partition("=")
    SECURE_PROXY_SSL_HEADER = (_name.strip(), _value.strip() or "https")

# Production (DEBUG off): cookies only over HTTPS, HSTS, and HTTP redirected to HTTPS. Each can be
# turned off for a deployment that terminates TLS elsewhere and talks plain HTTP end to end.
SESSION_COOKIE_SECURE = _env_bool("SECURE_COOKIES", default=not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_HTTPONLY = True
# Django's database sessions, read with a statement compiled once (approvals/server/database.py).
SESSION_ENGINE = "approvals.server.database"
SECURE_HSTS_SECONDS = int(_env("SECURE_HSTS_SECONDS", "0" if DEBUG else "31536000"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = _env_bool("SECURE_HSTS_PRELOAD", default=False)
SECURE_SSL_REDIRECT = _env_bool("SECURE_SSL_REDIRECT", default=False)

# --- Internationalisation, static files -------------------------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Where `collectstatic` writes; the server serves it itself (approvals/server/static_files.py).
STATIC_ROOT = Path(_env("STATIC_ROOT", str(BASE_DIR / "var" / "static")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Hashed names and gzip variants once collected; plain names before (see the class).
    "staticfiles": {"BACKEND": "approvals.server.static_files.CollectedStaticStorage"},
}
# Only this site's pages load these files: no CORS header.
WHITENOISE_ALLOW_ALL_ORIGINS = False


# --- Logging ----------------------------------------------------------------------------------------

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "console": {"format": "{asctime} {levelname} {name}: {message}", "style": "{"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "console"},
    },
    "root": {"handlers": ["console"], "level": _env("LOG_LEVEL", "INFO").upper()},
    "loggers": {
        # Request lines are Daphne's job; keep Django's own chatter to warnings.
        "django": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        # Every failed login would be an INFO line; lock-outs are warnings.
        "axes": {"handlers": ["console"], "level": "WARNING", "propagate": False},
    },
}
