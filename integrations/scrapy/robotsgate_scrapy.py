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
  ``shutting-down``, ``upstream-error``) reaches no callback and is retried
  when its ``Retry-After`` has passed, as RetryMiddleware would retry it
  (``RETRY_TIMES``, ``retry/*`` stats), and only once per answer. A waiting
  retry holds none of ``CONCURRENT_REQUESTS`` (a reactor timer hands it to
  the scheduler when it is due) and keeps the spider open; one still waiting
  when the spider closes is not sent (``robotsgate/retry/unsent``), but saved
  for the resumed crawl when there is a ``JOBDIR``
  (``robotsgate/retry/resumed``). Once ``RETRY_TIMES`` is spent, the answer
  goes on like any other 429 or 503. A request Scrapy downloads outside the
  scheduler (``callback=NO_CALLBACK``: robots.txt for ``ROBOTSTXT_OBEY``,
  FilesPipeline and ImagesPipeline files) is left to RetryMiddleware, which
  retries it at once (see ``_retry_later``);
* a ``would-block`` answer (robotsgate in report mode: the page was fetched,
  but enforce mode would block it) goes on to the callbacks as usual, and is
  logged at INFO like a block, worded "robotsgate would block";
* an answer robotsgate held for pacing or an origin's back-off before it sent
  the request (``X-Robots-Gate-Held``, the seconds held) is counted in
  ``robotsgate/held``, its seconds added to ``robotsgate/held_seconds`` and
  the longest kept in ``robotsgate/held_seconds_max``: Scrapy's
  ``download_latency`` (and so AutoThrottle) counts that time as the site's.

Install it with pip (``pip install ./integrations/scrapy``; offline, in a
virtualenv made with ``--system-site-packages``: ``pip install
--no-build-isolation --no-index ./integrations/scrapy``), or put this file's
directory on ``PYTHONPATH``, then enable it in settings.py::

    DOWNLOADER_MIDDLEWARES = {
        "robotsgate_scrapy.RobotsGateMiddleware": 555,
    }

The order number must lie between 551 and 849. A downloader middleware's
``process_response`` runs from the highest order number to the lowest: above
RetryMiddleware (550), this middleware sees robotsgate's answers before
RetryMiddleware does, so a block is dropped before it could be retried (even
with 403 in ``RETRY_HTTP_CODES``) and a temporary answer is retried here, after
its ``Retry-After``, instead of at once by RetryMiddleware; below
DownloaderStats (850), Scrapy's own ``downloader/response_status_count/*``
stats still count the answers it drops.
555 shares its number with no built-in middleware. A warning is logged at
start-up when the order puts it after RetryMiddleware.

Settings:

``ROBOTSGATE_MAX_RETRY_AFTER`` (seconds, default 600)
    The longest a retry waits for a ``Retry-After``; a longer one is cut to it.

Scrapy's ``RETRY_ENABLED``, ``RETRY_TIMES`` and ``RETRY_PRIORITY_ADJUST``, and
the ``dont_retry``, ``max_retry_times`` and ``priority_adjust`` meta keys,
apply to the retries of temporary answers as they do to RetryMiddleware's.
"""

import email.utils
import logging
import pickle
import re
import time

from scrapy import signals
from scrapy.downloadermiddlewares.retry import get_retry_request
from scrapy.exceptions import DontCloseSpider, IgnoreRequest
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.request import request_from_dict

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

# TEMPORARY are the decisions this middleware retries, after their
# Retry-After when they carry one.
TEMPORARY = frozenset(
    {"paced", "unreachable", "overloaded", "shutting-down", "upstream-error"}
)

# STATE_KEY is the spider.state key (JOBDIR's SpiderState extension) holding
# the retries waiting for their Retry-After: {token: (due, pickled request
# dict)}, due a wall-clock time (time.time()), so a crawl resumed from JOBDIR,
# even after a reboot, sends them when they are due (at once when overdue, and
# never later than ROBOTSGATE_MAX_RETRY_AFTER from the resume).
STATE_KEY = "robotsgate_retries"

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
    """RobotsGateMiddleware counts, logs, drops and retries robotsgate's answers.

    See the module docstring for how to enable it and what it does.
    """

    def __init__(self, crawler):
        self.crawler = crawler
        self.stats = crawler.stats
        settings = crawler.settings
        self.max_retry_after = max(
            0.0, settings.getfloat("ROBOTSGATE_MAX_RETRY_AFTER", 600.0)
        )
        self.retry_enabled = settings.getbool("RETRY_ENABLED")
        self._waiting = {}  # token: the DelayedCall that will send its retry
        self._stranded = set()  # tokens whose call came while the spider closed
        self._tokens = 0
        self._unsaved_logged = False
        crawler.signals.connect(self._spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self._spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(self._spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler):
        mw = cls(crawler)
        _warn_if_after_retry(crawler.settings)
        return mw

    def process_response(self, request, response, spider):
        self._count_held(response, spider)
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
            return self._retry_later(request, response, decision, spider)

        if decision == "would-block":
            logger.info(
                "robotsgate would block %(response)s (report mode): %(detail)s",
                {"response": response, "detail": _detail(rule, "")},
                extra={"spider": spider},
            )
        return response

    def _count_held(self, response, spider):
        """_count_held counts an answer robotsgate held for pacing or an
        origin's back-off before sending the request (X-Robots-Gate-Held, the
        seconds held): robotsgate/held (answers held), robotsgate/held_seconds
        (their seconds, summed) and robotsgate/held_seconds_max (the longest).
        Scrapy's download_latency, and so AutoThrottle, counts that time as
        the site's; these stats tell the two apart."""
        raw = response.headers.get(b"X-Robots-Gate-Held")
        if not raw:
            return
        held = _held(raw)
        if held is None:
            return
        stats = self.stats
        stats.inc_value("robotsgate/held", spider=spider)
        # Rounded to robotsgate's milliseconds, not summed in floats
        # (0.1 + 0.2 is 0.30000000000000004 in the dumped stats).
        total = stats.get_value("robotsgate/held_seconds", 0, spider=spider) + held
        stats.set_value("robotsgate/held_seconds", round(total, 3), spider=spider)
        stats.max_value("robotsgate/held_seconds_max", held, spider=spider)

    def _retry_later(self, request, response, decision, spider):
        """_retry_later schedules the retry of a temporary answer for when its
        Retry-After has passed, and drops the answer; or, when no retry is
        to be made, returns the answer.

        Nothing waits inside the downloader: Downloader.fetch counts a request
        against CONCURRENT_REQUESTS from before process_request until its
        response has left the middlewares, and ExecutionEngine.close_spider
        waits for every such request, so a wait there would let one paced or
        unreachable site take every slot of the crawl, and hold a graceful
        close for up to ROBOTSGATE_MAX_RETRY_AFTER. Instead the retry is
        handed to the engine (the scheduler) by a reactor timer when it is
        due, and the spider is kept open while such a timer is pending
        (_spider_idle).

        RetryMiddleware (550) never sees this answer: raising from
        process_response ends the chain of process_response methods, and
        process_exception is not called for it. The retry is made by Scrapy's
        own get_retry_request, as RetryMiddleware would make it: one
        retry/count and retry/reason_count per attempt, RETRY_TIMES (or meta
        max_retry_times) attempts at most, the priority lowered by
        RETRY_PRIORITY_ADJUST (or meta priority_adjust), dont_filter set.
        """
        retry_after = _header(response, b"Retry-After")
        wait = _retry_after(retry_after)
        wait = 0.0 if wait is None else min(wait, self.max_retry_after)
        if not self.retry_enabled or request.meta.get("dont_retry", False):
            # Not to be retried: the answer goes on like any other 429 or
            # 503 (HttpErrorMiddleware drops it unless the request allows
            # its status).
            return response
        if request.callback is NO_CALLBACK:
            # Downloaded outside the scheduler, by ExecutionEngine.download:
            # RobotsTxtMiddleware's robots.txt (ROBOTSTXT_OBEY), or a
            # FilesPipeline or ImagesPipeline file. Its answer goes back to
            # the code that asked for it, so it cannot be dropped here and
            # the retry sent through the scheduler later: it is left to
            # RetryMiddleware, which retries it at once.
            return response
        retry = get_retry_request(
            request,
            spider=spider,
            reason=f"robotsgate {decision}",
            priority_adjust=request.meta.get("priority_adjust"),
        )
        if retry is None:
            # get_retry_request has logged "Gave up retrying" and counted
            # retry/max_reached; dont_retry keeps RetryMiddleware from giving
            # up on it a second time. The answer goes on as above.
            request.meta["dont_retry"] = True
            return response
        logger.debug(
            "robotsgate answered %(response)s: %(decision)s, Retry-After: "
            "%(retry_after)s; retrying in %(wait).1f s",
            {
                "response": response,
                "decision": decision,
                "retry_after": retry_after or "none",
                "wait": wait,
            },
            extra={"spider": spider},
        )
        self._schedule(retry, wait, spider)
        # This attempt ends here, like one RetryMiddleware retries: its
        # errback is not called (the retry, a copy made above, keeps it) and
        # no callback sees the answer. Scrapy logs nothing for an
        # IgnoreRequest.
        request.errback = None
        raise IgnoreRequest(f"robotsgate {decision}: retrying in {wait:.1f} s")

    def _schedule(self, request, wait, spider):
        """_schedule hands request to the engine after wait seconds."""
        from twisted.internet import reactor  # the reactor Scrapy installed

        token = self._tokens
        self._tokens += 1
        self._save(token, request, wait, spider)
        self._waiting[token] = reactor.callLater(wait, self._send, token, request)

    def _send(self, token, request):
        self._waiting.pop(token, None)
        engine = self.crawler.engine
        slot = getattr(engine, "slot", None)
        if slot is None or slot.closing is not None or engine.spider is None:
            # The spider is closing: the scheduler takes nothing more. The
            # retry stays in spider.state, if there is one, for a resumed
            # crawl; _spider_closed counts it.
            self._stranded.add(token)
            return
        self._forget(token, engine.spider)
        engine.crawl(request)  # Scrapy 2.8: crawl(request), no spider

    def _save(self, token, request, wait, spider):
        """_save records the waiting retry in spider.state, which JOBDIR's
        SpiderState extension writes to disk when the spider closes (before
        this middleware's own spider_closed handler runs, so the record is
        kept up to date as retries come and go)."""
        state = getattr(spider, "state", None)
        if not isinstance(state, dict):
            return  # no JOBDIR
        try:
            blob = pickle.dumps(request.to_dict(spider=spider), protocol=4)
        except (ValueError, TypeError, AttributeError, pickle.PicklingError) as e:
            # As Scrapy's disk queues: a callback that is no method of the
            # spider, or a meta value pickle cannot write.
            if not self._unsaved_logged:
                self._unsaved_logged = True
                logger.warning(
                    "robotsgate: cannot save %(request)s in the job's spider "
                    "state (%(error)s): a retry waiting for Retry-After that "
                    "cannot be saved is lost if the crawl stops before it is "
                    "sent; no more such requests will be logged",
                    {"request": request, "error": e},
                    extra={"spider": spider},
                )
            return
        state.setdefault(STATE_KEY, {})[token] = (time.time() + wait, blob)

    def _forget(self, token, spider):
        state = getattr(spider, "state", None)
        if isinstance(state, dict):
            state.get(STATE_KEY, {}).pop(token, None)

    def _spider_opened(self, spider):
        # A crawl resumed from JOBDIR: SpiderState's spider_opened handler,
        # connected before this one, has loaded spider.state.
        state = getattr(spider, "state", None)
        saved = state.pop(STATE_KEY, None) if isinstance(state, dict) else None
        if not saved:
            return
        now = time.time()
        resumed = 0
        for due, blob in saved.values():
            try:
                request = request_from_dict(pickle.loads(blob), spider=spider)
            except Exception as e:  # a spider changed since the state was saved
                logger.warning(
                    "robotsgate: cannot resume a retry saved in the job's "
                    "spider state: %(error)s",
                    {"error": e},
                    extra={"spider": spider},
                )
                continue
            # The cap applies on reading too: a due time far off (a clock
            # set back, a state from another machine) waits no longer than
            # ROBOTSGATE_MAX_RETRY_AFTER.
            wait = min(max(due - now, 0.0), self.max_retry_after)
            self._schedule(request, wait, spider)
            resumed += 1
        self.stats.inc_value("robotsgate/retry/resumed", resumed, spider=spider)
        logger.info(
            "robotsgate: resuming %(n)d retries that were waiting for Retry-After",
            {"n": resumed},
            extra={"spider": spider},
        )

    def _spider_idle(self, spider):
        if self._waiting:
            raise DontCloseSpider

    def _spider_closed(self, spider, reason):
        pending = len(self._waiting) + len(self._stranded)
        for call in self._waiting.values():
            if call.active():
                call.cancel()
        self._waiting.clear()
        self._stranded.clear()
        if not pending:
            return
        state = getattr(spider, "state", None)
        saved = len(state.get(STATE_KEY, {})) if isinstance(state, dict) else 0
        self.stats.set_value("robotsgate/retry/unsent", pending, spider=spider)
        if saved:
            outcome = (
                f"{saved} of them are saved in the job's spider state, "
                "to be sent when the crawl resumes"
            )
        else:
            outcome = "they are not retried"
        logger.info(
            "robotsgate: %(pending)d retries waiting for Retry-After were not "
            "sent: the spider closed (%(reason)s); %(outcome)s",
            {"pending": pending, "reason": reason, "outcome": outcome},
            extra={"spider": spider},
        )


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


_HELD = re.compile(rb"[0-9]{1,9}\.[0-9]{3}")


def _held(raw):
    """_held is an X-Robots-Gate-Held value in seconds (robotsgate writes
    three decimals: "1.250"), or None when it is not in that form."""
    raw = raw.strip()
    return float(raw) if _HELD.fullmatch(raw) else None


def _retry_after(value):
    """_retry_after is a Retry-After value in seconds (delta-seconds or an
    HTTP-date, RFC 9110 section 10.2.3), or None when absent or unreadable."""
    if not value:
        return None
    if re.fullmatch(r"[0-9]+", value):  # not str.isdigit(): "²" is a digit
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
