"""What an S3 failure means to inkpen: not found, definite, or indefinite.

boto3 reports two families of failure: a :class:`~botocore.exceptions.ClientError` carries the
server's HTTP status and error code; a :class:`~botocore.exceptions.BotoCoreError` says the
request or its response never made it. The mapping (also in docs/stores.md, 'Errors'):

====================================================  =========================================
failure                                               inkpen error
====================================================  =========================================
``NoSuchKey``, HTTP 404                               :class:`NotFoundError`
``NoSuchBucket``                                      :class:`StoreError`, definite
HTTP 503 ``SlowDown`` and any other 4xx               :class:`StoreError`, definite
HTTP 500 and any other 5xx                            :class:`StoreError`, indefinite
connection refused, connect timeout, proxy failure    :class:`StoreError`, definite
read timeout, connection closed or reset, a response  :class:`StoreError`, indefinite
stream cut short, anything else
missing or partial credentials, invalid parameters    :class:`UsageError`
====================================================  =========================================
"""

from __future__ import annotations

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
    ProxyConnectionError,
)

from inkpen.errors import InkpenError, NotFoundError, StoreError, UsageError

_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
_REFUSED_CODES = frozenset({"SlowDown", "ServiceUnavailable", "503"})
_CREDENTIAL_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"}
)


def error_code(exc: ClientError) -> str:
    """The S3 error code of a client error (``"412"``-style when the response had no body)."""
    code = exc.response.get("Error", {}).get("Code")
    return str(code) if code else str(http_status(exc))


def http_status(exc: ClientError) -> int:
    """The HTTP status of a client error (0 when unknown)."""
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def map_s3_error(exc: Exception, *, action: str, key: str | None, where: str) -> InkpenError:
    """The inkpen error for ``exc``, raised while doing ``action`` on ``key`` at ``where``
    (a description of the bucket, prefix and endpoint)."""
    subject = f"S3 {action} of {key!r} at {where}" if key is not None else f"S3 {action} at {where}"
    if isinstance(exc, ClientError):
        return _client_error(exc, subject, key)
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return UsageError(
            f"{subject} found no usable AWS credentials; set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) for this process"
        )
    if isinstance(exc, ParamValidationError):
        return UsageError(f"{subject} was refused before sending: {exc}")
    if isinstance(exc, EndpointConnectionError | ConnectTimeoutError | ProxyConnectionError):
        return StoreError(
            f"{subject} could not connect: {exc}; check that the endpoint is right and running",
            definite=True,
            key=key,
        )
    if isinstance(exc, BotoCoreError):
        return StoreError(f"{subject} got no complete answer: {exc}", definite=False, key=key)
    return StoreError(f"{subject} failed: {exc!r}", definite=False, key=key)


def _client_error(exc: ClientError, subject: str, key: str | None) -> InkpenError:
    code = error_code(exc)
    status = http_status(exc)
    message = exc.response.get("Error", {}).get("Message") or code
    if code == "NoSuchBucket":
        return StoreError(
            f"{subject} failed: the bucket does not exist (any more); create it or fix the URL",
            definite=True,
            key=key,
        )
    if code in _NOT_FOUND_CODES or status == 404:
        return NotFoundError(f"{subject}: no such object", key=key)
    if code in _CREDENTIAL_CODES or status == 403:
        return StoreError(
            f"{subject} was denied ({code}: {message}); check the credentials and the bucket "
            "policy",
            definite=True,
            key=key,
        )
    if code in _REFUSED_CODES or status == 503:
        return StoreError(
            f"{subject} was refused by a busy server ({code}); retry later", definite=True, key=key
        )
    if status >= 500:
        return StoreError(
            f"{subject} failed on the server ({code}: {message})", definite=False, key=key
        )
    return StoreError(f"{subject} was rejected ({code}: {message})", definite=True, key=key)


_SERVER_CODES = frozenset({"InternalError", "500"})


def map_delete_error(code: str, message: str, *, key: str, where: str) -> StoreError | None:
    """The error of one key that a ``DeleteObjects`` request names (its S3 error code and
    message); None for a key that was absent, which a delete does not count as an error.
    A server error leaves the key's fate unknown (indefinite); any other error kept it."""
    subject = f"S3 delete of {key!r} at {where}"
    reason = f"{code}: {message}" if message else code
    if code in _NOT_FOUND_CODES:
        return None
    if code in _CREDENTIAL_CODES:
        return StoreError(
            f"{subject} was denied ({reason}); check the credentials and the bucket policy",
            definite=True,
            key=key,
        )
    if code in _REFUSED_CODES:
        return StoreError(
            f"{subject} was refused by a busy server ({reason}); retry later",
            definite=True,
            key=key,
        )
    if code in _SERVER_CODES:
        return StoreError(f"{subject} failed on the server ({reason})", definite=False, key=key)
    return StoreError(f"{subject} was rejected ({reason})", definite=True, key=key)


def whole_request_error(error: InkpenError, url: str) -> StoreError:
    """The error each key of a batched delete gets when the request failed as a whole (a
    :class:`NotFoundError` of a request is no key's absence: a plain :class:`StoreError`)."""
    if isinstance(error, NotFoundError) or not isinstance(error, StoreError):
        return StoreError(f"a batched delete at {url} failed: {error}", definite=True)
    return error
