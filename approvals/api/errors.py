"""The API's refusals: JSON ``{error, code, issues?}`` with a 4xx status.

Mastra's own bodies are ``{error}`` (and ``issues`` for a 400); ``code`` is ours, so a client can
branch without parsing the message. Mastra answers 500 for an unknown run or a call that is not
parked, which ``@mastra/client-js`` retries three times; we answer 404 / 409, which it does not.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        error: str,
        code: str,
        *,
        issues: list[dict[str, str]] | None = None,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.code = code
        self.issues = issues
        self.headers = headers or {}
        self.extra = extra

    def response(self) -> JsonResponse:
        body: dict[str, Any] = {"error": self.error, "code": self.code}
        if self.issues is not None:
            body["issues"] = self.issues
        body.update(self.extra)
        response = JsonResponse(body, status=self.status, json_dumps_params={"separators": (",", ":")})
        for name, value in self.headers.items():
            response[name] = value
        return response


def invalid_query(issues: list[dict[str, str]]) -> ApiError:
    return ApiError(400, "Invalid query parameters", "invalid_query", issues=issues)


def invalid_body(issues: list[dict[str, str]]) -> ApiError:
    return ApiError(400, "Invalid request body", "invalid_body", issues=issues)


def issue(field: str, message: str) -> dict[str, str]:
    return {"field": field, "message": message}


def path_not_found(name: str, problem: str) -> ApiError:
    """A path parameter that cannot name anything stored (NUL, a lone surrogate, too long)."""
    return ApiError(404, f"No such {name}: {problem}", "not_found", issues=[issue(name, problem)])


@csrf_exempt
def no_route(request: HttpRequest, path: str = "") -> JsonResponse:
    """Any path under ``/api/`` that is no route: a JSON 404, whatever the method (not the HTML page)."""
    return ApiError(404, f"No API route at {request.path}: see /api/docs/", "no_route").response()


def unavailable(retry_after: int) -> ApiError:
    """The database could not serve the request (out of reach, or its connection dropped)."""
    message = f"The database is not answering: try again in {retry_after} s"
    return try_later(503, message, "database_unavailable", retry_after)


def try_later(status: int, message: str, code: str, retry_after: int) -> ApiError:
    """A refusal the client may try again after ``retry_after`` seconds (header and body say when)."""
    return ApiError(status, message, code, headers={"Retry-After": str(retry_after)}, retryAfter=retry_after)
