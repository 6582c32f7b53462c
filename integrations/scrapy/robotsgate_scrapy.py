"""Scrapy downloader middleware for robotsgate's own answers.

robotsgate (https://github.com/robotsgate/robotsgate) marks every answer it
makes itself with an ``X-Robots-Gate`` header (``disallowed``, ``paced``, ...)
and, for a robots.txt or usage block, ``X-Robots-Gate-Rule`` (the deciding
rule and its line). Without this middleware a Scrapy crawl only sees anonymous
403s. With it:

* every response carrying ``X-Robots-Gate`` is counted in Scrapy's stats as
  ``robotsgate/<decision>`` (``robotsgate/disallowed``, ``robotsgate/paced``,
  ``robotsgate/would-block``, ...);
* a block (``disallowed``, ``denied``, ``private-address``, ``usage-refused``,
  ``price-refused``, ``bad-request``, ``misdirected``, ``auth-required``) is
  logged once at INFO, with its URL, decision and rule (or robotsgate's reason
  when there is no rule)::

      [robotsgate_scrapy] INFO: robotsgate blocked <403 http://site.example/private/a>: disallowed, rule "disallow: /private (line 2)"

  and dropped by raising ``RobotsGateBlocked`` (an ``IgnoreRequest``): it
  reaches no callback, is never retried, and Scrapy logs nothing more for it
  (a request's errback, if any, gets the failure; its ``.value`` carries
  ``decision``, ``rule``, ``reason`` and ``response``);
* a temporary answer (``paced`` 429, ``unreachable`` 503, ``overloaded``,
  ``shutting-down``, ``upstream-error``) is left to Scrapy's RetryMiddleware,
  and the retry it makes waits for the answer's ``Retry-After`` (see
  ``process_request``);
* a ``would-block`` answer (robotsgate in report mode: the page was fetched,
  but enforce mode would block it) goes on to the callbacks as usual, and is
  logged at INFO like a block, worded "robotsgate would block".

Enable it in settings.py, with this file's directory on ``PYTHONPATH`` (or the
file copied into your project, adjusting the dotted path)::

    DOWNLOADER_MIDDLEWARES = {
        "robotsgate_scrapy.RobotsGateMiddleware": 555,
    }

The order number must lie between 551 and 849. A downloader middleware's
``process_response`` runs from the highest order number to the lowest: above
RetryMiddleware (550), this middleware sees robotsgate's answers before
RetryMiddleware does, so a block is dropped before it could be retried (even
with 403 in ``RETRY_HTTP_CODES``) and the ``Retry-After`` of a temporary answer
is noted before the retry is made; below DownloaderStats (850), Scrapy's own
``downloader/response_status_count/*`` stats still count the answers it drops.
555 shares its number with no built-in middleware. A warning is logged at
start-up when the order puts it after RetryMiddleware.

Settings:

``ROBOTSGATE_MAX_RETRY_AFTER`` (seconds, default 600)
    The longest a retry waits for a ``Retry-After``; a longer one is cut to it.
"""

import email.utils
import logging
import re
import time

from scrapy.exceptions import IgnoreRequest

__all__ = ["RobotsGateMiddleware", "RobotsGateBlocked"]

logger = logging.getLogger(__name__)

# BLOCKED are the decisions this middleware drops: retrying cannot change them.
BLOCKED = frozenset(
    {
        "disallowed",
        "denied",
        "private-address",
        "usage-refused",
        "price-refused",
        "bad-request",
        "misdirected",
        "auth-required",
    }
)

# TEMPORARY are the decisions left to RetryMiddleware, waiting for their
# Retry-After when they carry one.
TEMPORARY = frozenset(
    {"paced", "unreachable", "overloaded", "shutting-down", "upstream-error"}
)

# RETRY_AT_META is the request.meta key holding (url, time.monotonic()): a
# retry of that URL is not sent before that time. Request.copy(), which
# RetryMiddleware uses to make the retry, copies meta, so the retry carries it;
# the URL keeps a request that merely copied the meta (a redirect, a callback's
# follow-up) from waiting too.
RETRY_AT_META = "robotsgate_retry_at"

_DECISION = re.compile(r"[a-z][a-z-]{0,31}")
_MAX_DETAIL = 300  # characters of a rule or reason put in a log line


class RobotsGateBlocked(IgnoreRequest):
    """RobotsGateBlocked is raised for a request robotsgate blocked.

    decision is the X-Robots-Gate value, rule the X-Robots-Gate-Rule ("" if
    none), reason the first line of robotsgate's plain-text body ("" if none)
    and response the answer itself.
    """

    def __init__(self, decision, rule, reason, response):
        super().__init__(f"robotsgate {decision}: {response.url}")
        self.decision = decision
        self.rule = rule
        self.reason = reason
        self.response = response


class RobotsGateMiddleware:
    """RobotsGateMiddleware counts, logs, drops and paces robotsgate's answers.

    See the module docstring for how to enable it and what it does.
    """

    def __init__(self, stats, max_retry_after=600.0):
        self.stats = stats
        self.max_retry_after = max_retry_after

    @classmethod
    def from_crawler(cls, crawler):
        mw = cls(
            crawler.stats,
            crawler.settings.getfloat("ROBOTSGATE_MAX_RETRY_AFTER", 600.0),
        )
        _warn_if_after_retry(crawler.settings)
        return mw

    def process_request(self, request, spider):
        # A retry of a temporary answer waits here until its Retry-After has
        # passed, without blocking the reactor: the Deferred returned fires
        # None then, and the download goes on. The wait is measured from the
        # answer, so time the retry spent in the scheduler counts. While it
        # waits the request holds one of CONCURRENT_REQUESTS (the download
        # slot, per domain, is taken only after this), and its
        # DOWNLOAD_TIMEOUT has not started.
        url, retry_at = request.meta.get(RETRY_AT_META, (None, 0.0))
        if url != request.url:
            return None
        wait = retry_at - time.monotonic()
        if wait <= 0:
            return None
        from twisted.internet import reactor  # the reactor Scrapy installed
        from twisted.internet.task import deferLater

        logger.debug(
            "robotsgate: %(request)s waits %(wait).1f s for Retry-After",
            {"request": request, "wait": wait},
            extra={"spider": spider},
        )
        return deferLater(reactor, wait, lambda: None)

    def process_response(self, request, response, spider):
        raw = response.headers.get(b"X-Robots-Gate")
        if not raw:
            return response  # the site's own answer, or an allowed page
        decision = raw.decode("latin-1").strip().lower()
        if not _DECISION.fullmatch(decision):
            decision = "unknown"
        self.stats.inc_value(f"robotsgate/{decision}", spider=spider)
        rule = _header(response, b"X-Robots-Gate-Rule")

        if decision in BLOCKED:
            # "Once": one INFO line per blocked request. The block is dropped
            # here, before RetryMiddleware, so no retry can log it again; a
            # URL requested twice on purpose (dont_filter) is blocked, and
            # logged, twice, as robotsgate audits it twice. No set of seen
            # URLs is kept: it would grow with the crawl.
            reason = "" if rule else _reason(response)
            logger.info(
                "robotsgate blocked %(response)s: %(decision)s, %(detail)s",
                {
                    "response": response,
                    "decision": decision,
                    "detail": _detail(rule, reason),
                },
                extra={"spider": spider},
            )
            raise RobotsGateBlocked(decision, rule, reason, response)

        if decision in TEMPORARY:
            retry_after = _header(response, b"Retry-After")
            wait = _retry_after(retry_after)
            if wait is not None:
                wait = min(wait, self.max_retry_after)
                request.meta[RETRY_AT_META] = (request.url, time.monotonic() + wait)
            logger.debug(
                "robotsgate answered %(response)s: %(decision)s, Retry-After: %(retry_after)s",
                {
                    "response": response,
                    "decision": decision,
                    "retry_after": retry_after or "none",
                },
                extra={"spider": spider},
            )
            return response  # for RetryMiddleware to retry or give up on

        if decision == "would-block":
            logger.info(
                "robotsgate would block %(response)s (report mode): %(detail)s",
                {"response": response, "detail": _detail(rule, "")},
                extra={"spider": spider},
            )
        return response


def _header(response, name):
    value = response.headers.get(name)
    return value.decode("latin-1").strip() if value else ""


def _reason(response):
    """_reason is the first line of robotsgate's plain-text body, without its
    "robotsgate: " prefix; "" for another body (browser block style)."""
    ctype = _header(response, b"Content-Type").lower()
    if not ctype.startswith("text/plain"):
        return ""
    line = response.body[:1024].split(b"\n", 1)[0].decode("utf-8", "replace")
    if line.startswith("robotsgate: "):
        line = line[len("robotsgate: ") :]
    return line.strip()


def _detail(rule, reason):
    if rule:
        return f'rule "{rule[:_MAX_DETAIL]}"'
    if reason:
        return f'reason "{reason[:_MAX_DETAIL]}"'
    return "no rule given"


def _retry_after(value):
    """_retry_after is a Retry-After value in seconds (delta-seconds or an
    HTTP-date, RFC 9110 section 10.2.3), or None when absent or unreadable."""
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def _warn_if_after_retry(settings):
    """_warn_if_after_retry logs a warning when DOWNLOADER_MIDDLEWARES puts
    this middleware's process_response after RetryMiddleware's."""
    from scrapy.downloadermiddlewares.retry import RetryMiddleware
    from scrapy.utils.conf import build_component_list
    from scrapy.utils.misc import load_object

    ours = retry = None
    try:
        paths = build_component_list(settings.getwithbase("DOWNLOADER_MIDDLEWARES"))
        for i, path in enumerate(paths):
            obj = load_object(path) if isinstance(path, str) else path
            if not isinstance(obj, type):
                continue
            if issubclass(obj, RobotsGateMiddleware) and ours is None:
                ours = i
            elif issubclass(obj, RetryMiddleware) and retry is None:
                retry = i
    except Exception:  # a bad entry: Scrapy reports it itself
        return
    # Lower in this list is a lower order number: process_response runs later.
    if ours is not None and retry is not None and ours < retry:
        logger.warning(
            "RobotsGateMiddleware is ordered before RetryMiddleware (550) in "
            "DOWNLOADER_MIDDLEWARES: give it a number between 551 and 849, "
            "such as 555, or RetryMiddleware sees robotsgate's answers first"
        )
