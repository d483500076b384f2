"""Where the Hugging Face Hub is, how Tandem talks to it, and one line for every way a
request fails.

The endpoint is ``HF_ENDPOINT`` (huggingface_hub's own variable: a mirror, or a local
Hub in the tests), read at each call so a test or a user can change it without a
restart. The user's token is huggingface_hub's: ``HF_TOKEN`` or ``hf auth login``;
Tandem passes it in a header and never writes or logs it.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

from app.errors import TandemError

DEFAULT_ENDPOINT = "https://huggingface.co"
CONNECT_TIMEOUT_S = 10.0   # a Hub that does not answer the connection: "cannot be reached"
READ_TIMEOUT_S = 30.0      # a Hub that stops sending mid-answer (a header, a download chunk)
RETRIES = 4                # tries after the first for a 429, a 5xx or a dropped connection
BACKOFF_S = 0.5            # the first wait; each next one doubles
RETRY_STATUSES = (429, 500, 502, 503, 504)

T = TypeVar("T")


class HubError(TandemError):
    """The Hub could not answer, or answered something Tandem cannot use."""


class HubUnreachable(HubError):
    """No answer at all: offline, a firewall, the endpoint down."""


class HubNotFound(HubError):
    """The repository, revision or file does not exist (or is private without a token)."""


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline() -> bool:
    """huggingface_hub's offline switch (``HF_HUB_OFFLINE=1``), read now."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "on", "yes", "true")


def auth_headers() -> dict[str, str]:
    """huggingface_hub's headers: its user agent, and the user's token where they have one."""
    from huggingface_hub.utils import build_hf_headers

    headers = build_hf_headers()
    headers["Accept-Encoding"] = "identity"  # sizes and byte ranges of the file itself
    return headers


def session():
    """huggingface_hub's HTTP client (its proxies and certificates)."""
    from huggingface_hub import get_session

    return get_session()


def timeout():
    import httpx2

    return httpx2.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)


def retrying(call: Callable[[], T], *, sleep: Callable[[float], None] = time.sleep,
             stop: Callable[[], bool] = lambda: False) -> T:
    """``call()``, tried again after a 429, a 5xx or a dropped connection, with waits
    that double (``BACKOFF_S``, ``RETRIES`` times); a 429's Retry-After is honoured up to
    a minute. Anything else, and the last failure, is raised as it is."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    wait = BACKOFF_S
    for attempt in range(RETRIES + 1):
        try:
            return call()
        except (httpx2.TransportError, HfHubHTTPError, _RetryableStatus) as exc:
            status = _status_of(exc)
            retryable = status in RETRY_STATUSES or (status is None and _transient(exc))
            if attempt == RETRIES or not retryable or stop():
                raise
            pause = wait
            after = _retry_after(exc)
            if after is not None:
                pause = min(60.0, max(pause, after))
            sleep(pause)
            wait *= 2
    raise AssertionError("unreachable")


class _RetryableStatus(Exception):
    """A response of ours (not huggingface_hub's) with a status worth another try."""

    def __init__(self, response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


def raise_for_status(response) -> None:
    """A response Tandem requested itself: a retryable status raised for ``retrying``,
    any other failure as huggingface_hub's own error (its messages, its kinds)."""
    if response.status_code in RETRY_STATUSES:
        raise _RetryableStatus(response)
    from huggingface_hub.utils import hf_raise_for_status

    hf_raise_for_status(response)


def _status_of(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    value = getattr(response, "headers", {}).get("Retry-After") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _transient(exc: BaseException) -> bool:
    import httpx2

    # A connection refused is the Hub being down or the machine offline: another try in a
    # second will not help, and a user waits for the one line that says so.
    return isinstance(exc, httpx2.TransportError) and not isinstance(exc, httpx2.ConnectError)


@contextmanager
def hub_errors(what: str) -> Iterator[None]:
    """Every failure of a Hub request as one HubError line that says ``what`` failed
    and why; a TandemError raised inside passes as it is."""
    import httpx2
    from huggingface_hub import errors

    try:
        if offline():
            raise HubUnreachable(f"{what}: Hugging Face is switched off on this machine (HF_HUB_OFFLINE is set); "
                                 "the models you have still work")
        yield
    except TandemError:
        raise
    except errors.OfflineModeIsEnabled:
        raise HubUnreachable(f"{what}: Hugging Face is switched off on this machine (HF_HUB_OFFLINE is set); "
                             "the models you have still work") from None
    except errors.GatedRepoError:
        raise HubNotFound(f"{what}: the repository is gated; accept its terms on the Hub and log in "
                          "(HF_TOKEN or 'hf auth login')") from None
    except errors.RepositoryNotFoundError:
        raise HubNotFound(f"{what}: no such repository on {endpoint()} (or it is private: log in with "
                          "HF_TOKEN or 'hf auth login')") from None
    except errors.RevisionNotFoundError:
        raise HubNotFound(f"{what}: no such revision") from None
    except errors.EntryNotFoundError:
        raise HubNotFound(f"{what}: no such file in the repository") from None
    except (errors.HfHubHTTPError, _RetryableStatus) as exc:
        status = _status_of(exc)
        raise HubError(f"{what}: the Hub answered HTTP {status}" + (" (too many requests; try again later)"
                                                                    if status == 429 else "")) from None
    except httpx2.TimeoutException:
        raise HubUnreachable(f"{what}: {endpoint()} did not answer in time; check the connection") from None
    except httpx2.TransportError as exc:
        raise HubUnreachable(f"{what}: cannot reach {endpoint()} ({_reason(exc)}); "
                             "the models you have still work") from None
    except (ValueError, KeyError, TypeError) as exc:  # an answer that is not the Hub's shape
        raise HubError(f"{what}: the Hub's answer could not be read ({type(exc).__name__})") from None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 120 else line[:117] + "..."
