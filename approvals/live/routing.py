from django.urls import path

from approvals.live.consumer import LiveConsumer

#: Where pages open the live-updates socket (``base.html`` reads it through ``{% live_socket_path %}``).
LIVE_PATH = "ws/live/"

websocket_urlpatterns = [path(LIVE_PATH, LiveConsumer.as_asgi())]
