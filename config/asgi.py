"""ASGI entry point: HTTP through Django, websockets through Channels (served by Daphne)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# Set up Django (apps, settings) before anything imports models through the routing below.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from approvals.db_threads import RequestThreads  # noqa: E402
from approvals.origins import SameOriginValidator  # noqa: E402
from approvals.routing import websocket_urlpatterns  # noqa: E402

# Daphne, unlike `runserver`, does not serve /static/; in development (DEBUG) Django does it here.
# In production put `collectstatic`'s output (var/static) behind the reverse proxy instead.
http_app = ASGIStaticFilesHandler(django_asgi_app) if settings.DEBUG else django_asgi_app


application = ProtocolTypeRouter(
    {
        # Each request's thread gives its database connections back, even when the request was cut off.
        "http": RequestThreads(http_app),
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
