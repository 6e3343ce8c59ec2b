"""WSGI entry point (plain HTTP only; live updates need the ASGI application)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_wsgi_application()

from approvals.checks import refuse_public_secret_key  # noqa: E402

# Never serve with DEBUG off and the repository's public SECRET_KEY.
refuse_public_secret_key()
