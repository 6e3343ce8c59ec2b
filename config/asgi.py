"""ASGI entry point: HTTP through Django, websockets through Channels (served by Daphne)."""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# Set up Django (apps, settings) before anything imports models through the routing below.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from approvals import tasks  # noqa: E402
from approvals.checks import refuse_public_secret_key  # noqa: E402
from approvals.live.origins import SameOriginValidator  # noqa: E402
from approvals.live.routing import websocket_urlpatterns  # noqa: E402
from approvals.server import daphne_requests, reason_phrases  # noqa: E402
from approvals.server.database import RequestThreads  # noqa: E402
from approvals.server.static_files import StaticFiles  # noqa: E402

# Never serve with DEBUG off and the repository's public SECRET_KEY.
refuse_public_secret_key()

# Daphne's status lines say "429 Too Many Requests", not "429 Unknown Status".
reason_phrases.complete()

# Daphne's requests bound what one client makes the process hold: bodies left to Django unparsed and
# refused over its limit, a pipelined request held while the answer before it waits unread.
daphne_requests.install()

# Parked calls past their deadline expire from this process once it serves, unless a task worker
# expires them (approvals/tasks.py).
application = tasks.ServeWithSweep(
    ProtocolTypeRouter(
        {
            # Each request's thread gives its database connections back, even when the request was cut off.
            # Static files are answered first, on the event loop (approvals/server/static_files.py).
            "http": StaticFiles(RequestThreads(django_asgi_app)),
            "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
)

# What is loaded by now (modules, classes, settings, the runtime and its agents) lives as long as the
# process. Frozen, it is no longer walked by the collector's full collections, each of which stalled
# this process's event loop, every request and socket on it (bench/gc_pauses.py, docs/scaling.md).
# Collected first, so that no garbage is frozen with it.
gc.collect()
gc.freeze()
