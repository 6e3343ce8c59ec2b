"""The sign-in backend: Django's ``ModelBackend``, with a user's permissions read in one query.

Every page and API request resolves the user's rights (``access.Access.of``: may they decide, may
they audit). Django reads a user's own permissions and their groups' permissions in two queries;
this reads both in one (cached on the user object for the request, as Django does).
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth import backends
from django.contrib.auth.models import Permission
from django.db.models import Q


class ModelBackend(backends.ModelBackend):
    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        if not hasattr(user_obj, "_perm_cache"):
            held = Permission.objects.all()
            if not user_obj.is_superuser:
                held = held.filter(Q(user=user_obj) | Q(group__user=user_obj))
            user_obj._perm_cache = {
                f"{app_label}.{codename}"
                for app_label, codename in held.values_list("content_type__app_label", "codename").order_by()
            }
        cached: set[str] = user_obj._perm_cache
        return cached

    async def aget_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        return await sync_to_async(self.get_all_permissions)(user_obj, obj)
