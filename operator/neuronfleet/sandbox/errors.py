"""API errors of the emulated Kubernetes API server, rendered as the ``Status`` bodies a real one sends."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error answered as a ``kind: Status`` body with the HTTP code ``code``."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{qualified(plural, group)} "{name}" not found',
        {"name": name, "group": group, "kind": plural},
    )


def resource_not_found(path: str) -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {"path": path})


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(plural, group)} "{name}" already exists',
        {"name": name, "group": group, "kind": plural},
    )


def conflict(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        {"name": name, "group": group, "kind": plural},
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


_CAUSE_REASONS = (
    ("Required value", "FieldValueRequired"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Forbidden", "FieldValueForbidden"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
)


def _cause_reason(message: str) -> str:
    return next((reason for prefix, reason in _CAUSE_REASONS if message.startswith(prefix)), "FieldValueInvalid")


def invalid(kind: str, group: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Invalid with one cause per (field, message); several are listed in brackets, as Go's
    aggregated field errors print."""
    listed = list(dict.fromkeys(f"{field}: {message}" if field else message for field, message in causes))
    summary = listed[0] if len(listed) == 1 else "[" + ", ".join(listed) + "]"
    return ApiError(
        422,
        "Invalid",
        f'{qualified(kind, group)} "{name}" is invalid: {summary}',
        {
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [
                {"reason": _cause_reason(message), "message": message, "field": field} for field, message in causes
            ],
        },
    )


def unprocessable(message: str) -> ApiError:
    return ApiError(422, "Invalid", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(message: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "Forbidden", message)
