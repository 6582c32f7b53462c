'use strict';
/**
 * robotsgate-crawlee: Crawlee's crawlers, told what robotsgate answered.
 *
 * robotsgate (https://github.com/robotsgate/robotsgate) marks every answer it
 * makes itself with an `X-Robots-Gate` header (`disallowed`, `paced`, ...),
 * and a robots.txt or usage block with `X-Robots-Gate-Rule` (the deciding
 * rule and its line). Crawlee reads a 401, 403 or 429 as a blocked session:
 * it retires the session (with a browser crawler, the browser too) and
 * retries the request up to `maxRequestRetries` times, so every block would
 * be sent again and again, and a `paced` 429 read as a ban.
 *
 * `new RobotsGate().wrap(options)` returns a crawler's options with:
 *
 * - a post-navigation hook, first of the hooks, that reads robotsgate's
 *   answer before Crawlee's session check: a block fails the request at once
 *   (`request.noRetry`) with a `RobotsGateBlocked` error naming the decision
 *   and the rule (or robotsgate's reason), as does an `upstream-error` no
 *   retry fixes (a site's certificate that does not verify); a temporary
 *   answer (`paced`, `unreachable`, `overloaded`, `shutting-down`, any other
 *   `upstream-error`) fails this attempt with a `RobotsGateRetry` error, to be
 *   retried;
 * - an `errorHandler` that waits for a temporary answer's `Retry-After`
 *   before Crawlee retries it (within `maxRequestRetries`), then calls
 *   yours;
 * - a `failedRequestHandler` that counts what failed, then calls yours;
 * - neither handler lets a robotsgate answer count against the session: the
 *   session is neither retired nor marked bad (a site's own 401, 403 and 429,
 *   which carry no `X-Robots-Gate`, are left to Crawlee as before).
 *
 * It needs nothing from Crawlee's packages (it only reads the crawling
 * context), so `npm install ./integrations/crawlee` works beside any Crawlee
 * 3 (tested with 3.18), in CommonJS and ES modules.
 */

const { setTimeout: sleep } = require('node:timers/promises');

/** BLOCKED are the decisions retrying cannot change: never retried. */
const BLOCKED = new Set([
    'disallowed',
    'denied',
    'private-address',
    'usage-refused',
    'price-refused',
    'bad-request',
    'misdirected',
    'auth-required',
]);

/** TEMPORARY are the decisions retried, after their Retry-After if any. */
const TEMPORARY = new Set(['paced', 'unreachable', 'overloaded', 'shutting-down', 'upstream-error']);

const DECISION = /^[a-z][a-z-]{0,31}$/;
// FINAL_UPSTREAM is an upstream-error's reason that no retry changes: the
// site's certificate does not verify, robotsgate's kind `tls-verify` (on the
// page, "upstream host:port: tls-verify: certificate signed by an unknown
// authority"; on its robots.txt, "robotsgate: robots.txt could not be
// fetched: tls-verify: ...; retrying will not help: ..."). robotsgate sends
// neither with a Retry-After; it says so in the body alone.
const FINAL_UPSTREAM = /(?:^|: )tls-verify: |retrying will not help/;
// HELD is X-Robots-Gate-Held as robotsgate writes it: seconds, three decimals
// ("1.250"), as the Scrapy middleware reads it; a site's own header in any
// other form ("Infinity", "1e9", "12abc") is not counted.
const HELD = /^\d{1,9}\.\d{3}$/;
// HTTP_DATE is RFC 9110's HTTP-date: IMF-fixdate, rfc850-date, asctime-date.
const HTTP_DATE =
    /^(?:[A-Za-z]{3}, \d{2} [A-Za-z]{3} \d{4} \d{2}:\d{2}:\d{2} GMT|[A-Za-z]{6,9}, \d{2}-[A-Za-z]{3}-\d{2} \d{2}:\d{2}:\d{2} GMT|[A-Za-z]{3} [A-Za-z]{3} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})$/;
const MAX_DETAIL = 300; // characters of a rule or reason put in a message
const MAX_BODY = 8192; // bytes of robotsgate's body read for its reason
const BODY_TIMEOUT_MS = 5000; // the longest a reason's body is waited for
const INTERNAL_MARGIN_SECS = 30; // kept free of Crawlee's internal timeout

/** SETTINGS are the names new RobotsGate() takes. */
const SETTINGS = ['maxRetryAfterSecs'];

/**
 * RobotsGateError is what the hook throws for an answer robotsgate made
 * itself. Its stack is its one line: Crawlee logs a final failure's stack,
 * and a block is not a fault in the crawler's code.
 */
class RobotsGateError extends Error {
    constructor(message, { decision, rule, reason, status, url }) {
        super(message);
        this.name = new.target.name;
        /** The `X-Robots-Gate` value: `disallowed`, `paced`, ... */
        this.decision = decision;
        /** `X-Robots-Gate-Rule`, "" if none. */
        this.rule = rule;
        /** robotsgate's reason from its body, "" if none or a rule was given. */
        this.reason = reason;
        /** The status robotsgate answered with. */
        this.status = status;
        /** The URL robotsgate answered for (after redirects). */
        this.url = url;
        this.stack = `${this.name}: ${message}`;
    }
}

/**
 * RobotsGateBlocked fails a request robotsgate blocked, or answered with an
 * `upstream-error` no retry fixes; it is never retried.
 */
class RobotsGateBlocked extends RobotsGateError {}

/**
 * RobotsGateRetry fails one attempt robotsgate answered for the time being
 * (`paced`, `unreachable`, ...); the request is retried after
 * `retryAfterSecs`.
 */
class RobotsGateRetry extends RobotsGateError {
    constructor(message, fields) {
        super(message, fields);
        /** Seconds from `Retry-After` (null without one). */
        this.retryAfterSecs = fields.retryAfterSecs;
    }
}

/**
 * RobotsGate holds the settings and the counts of one or more crawlers'
 * dealings with robotsgate.
 */
class RobotsGate {
    /**
     * @param {object} [settings]
     * @param {number} [settings.maxRetryAfterSecs=300] the longest wait for a
     *   Retry-After; a longer one is cut to it (and to what Crawlee's internal
     *   timeout for its error handler leaves).
     */
    constructor(settings = {}) {
        checkSettings(settings);
        const { maxRetryAfterSecs = 300 } = settings;
        if (!(maxRetryAfterSecs >= 0)) {
            throw new TypeError(`robotsgate-crawlee: maxRetryAfterSecs must be a number >= 0, got ${maxRetryAfterSecs}`);
        }
        this.maxRetryAfterSecs = maxRetryAfterSecs;
        /**
         * The counts, live. answers: every answer robotsgate made itself, by
         * its X-Robots-Gate value; blocked: requests failed at once, never
         * retried (blocks, and upstream errors no retry fixes); retries: attempts retried after a temporary answer;
         * waitedSecs: time waited for Retry-After; gaveUp: requests whose
         * last attempt was a temporary answer when maxRequestRetries ran out;
         * held and heldSecs: answers robotsgate held for pacing or an origin's
         * back-off (X-Robots-Gate-Held: allowed ones, and would-block ones in
         * report mode), and the seconds they were held (to the millisecond).
         */
        this.stats = { answers: {}, blocked: 0, retries: 0, waitedSecs: 0, gaveUp: 0, held: 0, heldSecs: 0 };
    }

    /**
     * wrap returns a copy of a Crawlee crawler's options (CheerioCrawler,
     * PlaywrightCrawler, and the other HTTP and browser crawlers) with this
     * gate's hook first among postNavigationHooks and errorHandler and
     * failedRequestHandler wrapped around yours (each is called as before).
     */
    wrap(options = {}) {
        checkBypassList(options);
        const userError = options.errorHandler;
        const userFailed = options.failedRequestHandler ?? options.handleFailedRequestFunction;
        const wrapped = {
            ...options,
            postNavigationHooks: [(ctx) => this._afterNavigation(ctx), ...(options.postNavigationHooks ?? [])],
            errorHandler: (ctx, error) => this._onError(ctx, error, userError),
            failedRequestHandler: (ctx, error) => this._onFailed(ctx, error, userFailed),
        };
        delete wrapped.handleFailedRequestFunction;
        return wrapped;
    }

    /** _afterNavigation reads robotsgate's answer, and throws for its own. */
    async _afterNavigation(ctx) {
        const answer = readAnswer(ctx.response);
        if (!answer) return;
        this._countHeld(ctx, answer);
        if (!answer.decision) return;
        const { decision } = answer;
        this._countAnswer(decision);
        if (BLOCKED.has(decision)) {
            ctx.request.noRetry = true;
            const reason = answer.rule ? '' : clip(await readReason(ctx.response));
            discard(ctx.response);
            throw new RobotsGateBlocked(
                `robotsgate blocked ${answer.url}: ${decision}, ${detail(answer.rule, reason)}; not retried`,
                { ...answer, reason },
            );
        }
        if (decision === 'upstream-error') await this._finalUpstream(ctx, answer);
        if (TEMPORARY.has(decision)) {
            const raw = answer.header('retry-after');
            const retryAfterSecs = parseRetryAfter(raw);
            discard(ctx.response);
            throw new RobotsGateRetry(
                `robotsgate answered ${answer.url}: ${decision} (${answer.status}, Retry-After: ${raw || 'none'})`,
                { ...answer, reason: '', retryAfterSecs },
            );
        }
        if (decision === 'would-block') {
            ctx.log?.info(`robotsgate would block ${answer.url} (report mode): ${detail(answer.rule, '')}`);
        }
    }

    /**
     * _finalUpstream fails the request at once, as a block, for an
     * upstream-error whose reason says no retry fixes it (the site's
     * certificate does not verify); it returns for any other, which is
     * retried.
     */
    async _finalUpstream(ctx, answer) {
        const reason = await readReason(ctx.response);
        if (!FINAL_UPSTREAM.test(reason)) return;
        ctx.request.noRetry = true;
        discard(ctx.response);
        throw new RobotsGateBlocked(
            `robotsgate answered ${answer.url}: upstream-error (${answer.status}), ${detail('', clip(reason))}; not retried: no retry fixes it`,
            { ...answer, reason: clip(reason) },
        );
    }

    _countAnswer(decision) {
        const { answers } = this.stats;
        answers[decision] = (Object.hasOwn(answers, decision) ? answers[decision] : 0) + 1;
    }

    /**
     * _countHeld counts an answer robotsgate held before sending its request
     * (X-Robots-Gate-Held, whatever the decision: an allowed page, or a
     * would-block one in report mode), as the Scrapy middleware does.
     */
    _countHeld(ctx, answer) {
        const raw = answer.header('x-robots-gate-held');
        if (!HELD.test(raw)) return;
        const held = Number(raw);
        this.stats.held++;
        // Summed to robotsgate's milliseconds, not in floats (0.1 + 0.2 is
        // 0.30000000000000004).
        this.stats.heldSecs = Math.round((this.stats.heldSecs + held) * 1000) / 1000;
        ctx.log?.debug(`robotsgate held ${answer.url} for ${raw} s`);
    }

    /**
     * _onError runs when Crawlee is about to retry a request: yours first,
     * then, for a temporary answer still to be retried, the wait for its
     * Retry-After.
     */
    async _onError(ctx, error, userError) {
        try {
            if (userError) await userError(ctx, error);
            if (error instanceof RobotsGateRetry && !ctx.request.noRetry) {
                await this._wait(ctx, error);
            }
        } finally {
            if (error instanceof RobotsGateError) keepSession(ctx);
        }
    }

    async _wait(ctx, error) {
        const budget = (ctx.crawler?.internalTimeoutMillis ?? 300e3) / 1000 - INTERNAL_MARGIN_SECS;
        const secs = Math.max(0, Math.min(error.retryAfterSecs ?? 0, this.maxRetryAfterSecs, budget));
        if (secs > 0) {
            ctx.log?.info(`robotsgate ${error.decision} ${error.url}: retrying in ${secs} s`);
            await prolongLock(ctx, secs);
            await sleep(secs * 1000);
        }
        this.stats.retries++;
        this.stats.waitedSecs += secs;
    }

    /**
     * _onFailed runs once for a request that failed for good: counts it,
     * explains a robotsgate answer Crawlee failed before the hook saw it, then
     * calls yours.
     */
    async _onFailed(ctx, error, userFailed) {
        let gate = error instanceof RobotsGateError;
        if (error instanceof RobotsGateBlocked) {
            this.stats.blocked++;
        } else if (error instanceof RobotsGateRetry) {
            this.stats.gaveUp++;
        } else {
            gate = await this._failedEarly(ctx);
        }
        try {
            if (userFailed) await userFailed(ctx, error);
        } finally {
            if (gate) keepSession(ctx);
        }
    }

    /**
     * _failedEarly counts and logs an answer of robotsgate's that Crawlee
     * failed before any post-navigation hook ran: an HTTP crawler refuses a
     * text/plain body outright unless its status is 5xx or a blocked status
     * code (robotsgate's 400, 402, 407 and 421), without retrying it.
     */
    async _failedEarly(ctx) {
        const answer = readAnswer(ctx.response);
        if (!answer?.decision) return false;
        const { decision } = answer;
        this._countAnswer(decision);
        if (TEMPORARY.has(decision)) {
            this.stats.gaveUp++;
        } else {
            this.stats.blocked++;
        }
        const reason = answer.rule ? '' : clip(await readReason(ctx.response));
        ctx.log?.info(`robotsgate answered ${answer.url}: ${decision} (${answer.status}), ${detail(answer.rule, reason)}`);
        return true;
    }
}

/**
 * readAnswer reads the status and robotsgate's headers from a crawling
 * context's response: an HTTP crawler's (got) or a browser's (Playwright's
 * or Puppeteer's, whose status and headers are methods). null without one.
 */
function readAnswer(response) {
    if (!response || typeof response !== 'object') return null;
    let headers;
    try {
        headers = typeof response.headers === 'function' ? response.headers() : response.headers;
    } catch {
        return null;
    }
    if (!headers || typeof headers !== 'object') return null;
    const header = (name) => {
        const v = headers[name] ?? headers[name.toLowerCase()];
        return (Array.isArray(v) ? v[0] : v ?? '').toString().trim();
    };
    const status = typeof response.status === 'function' ? response.status() : response.statusCode;
    const url = typeof response.url === 'function' ? response.url() : response.url;
    let decision = header('x-robots-gate').toLowerCase();
    if (decision && !DECISION.test(decision)) decision = 'unknown';
    return { decision, rule: header('x-robots-gate-rule'), status, url: String(url ?? ''), header };
}

/**
 * readReason is robotsgate's reason from its plain-text body: its `reason:`
 * line, else its first line, whole (clip cuts it for a message); "" when the
 * body cannot be read.
 */
function readReason(response) {
    // Read once: a second read of a stream already read to MAX_BODY, or
    // ended, would find a tail or nothing.
    if (response && typeof response === 'object') {
        let reason = reasons.get(response);
        if (!reason) reasons.set(response, (reason = readReasonOnce(response)));
        return reason;
    }
    return readReasonOnce(response);
}

/** reasons holds each response's reason, read once (readReason). */
const reasons = new WeakMap();

/** readReasonOnce reads robotsgate's reason from response's body. */
async function readReasonOnce(response) {
    let text = '';
    try {
        text = await Promise.race([readBody(response), sleep(BODY_TIMEOUT_MS, '', { ref: false })]);
    } catch {
        return '';
    }
    const lines = text.split('\n').map((l) => l.trim());
    const reason = lines.find((l) => l.startsWith('reason:'));
    return reason ? reason.slice('reason:'.length).trim() : lines.find((l) => l) ?? '';
}

/** clip cuts a rule or reason to what a message holds. */
function clip(text) {
    return text.slice(0, MAX_DETAIL);
}

/**
 * readBody reads up to MAX_BODY bytes of a response's body: a browser's
 * response by its text(), an HTTP crawler's stream by reading it. The
 * stream is never destroyed (breaking out of a for await would destroy it,
 * and its keep-alive connection with it): past MAX_BODY the rest flows on,
 * unread, to its end, so that the connection can be used again.
 */
function readBody(response) {
    if (typeof response.text === 'function') return response.text();
    if (typeof response.on !== 'function' || typeof response.resume !== 'function') return '';
    if (response.readableEnded || response.destroyed) return '';
    return new Promise((resolve, reject) => {
        const chunks = [];
        let size = 0;
        const stop = (err) => {
            response.off('data', onData);
            response.off('end', stop);
            response.off('close', stop);
            response.off('error', stop);
            response.on('error', () => {}); // moot once read
            if (err) {
                reject(err);
            } else {
                resolve(Buffer.concat(chunks).subarray(0, MAX_BODY).toString('utf8'));
            }
        };
        const onData = (chunk) => {
            chunks.push(Buffer.from(chunk));
            size += chunk.length;
            // Without a 'data' listener the stream still flows: the rest
            // is discarded as it comes.
            if (size >= MAX_BODY) stop();
        };
        response.on('data', onData);
        response.once('end', stop);
        response.once('close', stop);
        response.once('error', stop);
        response.resume();
    });
}

/**
 * discard lets the rest of an HTTP crawler's response stream flow away, so
 * that its connection to the proxy can be used again; a browser's response
 * needs nothing.
 */
function discard(response) {
    if (typeof response.resume === 'function' && typeof response.pipe === 'function' && !response.destroyed) {
        response.on('error', () => {});
        response.resume();
    }
}

function detail(rule, reason) {
    if (rule) return `rule "${rule.slice(0, MAX_DETAIL)}"`;
    if (reason) return `reason "${reason}"`;
    return 'no rule given';
}

/**
 * parseRetryAfter reads a Retry-After value, whole seconds or an HTTP date,
 * as seconds from now (0 for a date past); null when absent or unreadable.
 */
function parseRetryAfter(value) {
    if (!value) return null;
    if (/^\d+$/.test(value)) return Number(value);
    // Date.parse reads "-5" or "1.5" as dates: only HTTP-date's forms.
    if (!HTTP_DATE.test(value)) return null;
    const at = Date.parse(value);
    if (Number.isNaN(at)) return null;
    return Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

/**
 * checkSettings throws for settings that are not an object or hold a name
 * new RobotsGate() does not take (a misspelled one would be ignored),
 * naming the closest known one and all of them.
 */
function checkSettings(settings) {
    if (settings === null || typeof settings !== 'object' || Array.isArray(settings)) {
        throw new TypeError(`robotsgate-crawlee: new RobotsGate(settings) takes an object such as { maxRetryAfterSecs: 300 }, got ${settings === null ? 'null' : typeof settings}`);
    }
    for (const name of Object.keys(settings)) {
        if (SETTINGS.includes(name)) continue;
        const near = SETTINGS.find((known) => known.toLowerCase() === name.toLowerCase() || editDistance(known, name) <= 2);
        throw new TypeError(
            `robotsgate-crawlee: new RobotsGate() has no setting "${name}"${near ? `; did you mean ${near}?` : ''} (the settings: ${SETTINGS.join(', ')})`,
        );
    }
}

/** editDistance is the Levenshtein distance between two short names. */
function editDistance(a, b) {
    let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
    for (let i = 1; i <= a.length; i++) {
        const row = [i];
        for (let j = 1; j <= b.length; j++) {
            row[j] = Math.min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
        }
        prev = row;
    }
    return prev[b.length];
}

/**
 * checkBypassList throws for a browser launched with a --proxy-bypass-list
 * that has no <-loopback>: Chromium then sends every loopback site
 * (localhost, 127.0.0.1, [::1]) around the proxy, unchecked, whatever the
 * list names, and the list replaces Playwright's own (which is just
 * <-loopback>), so a crawl of a local site goes around robotsgate silently.
 */
function checkBypassList(options) {
    const args = options.launchContext?.launchOptions?.args;
    if (!Array.isArray(args)) return;
    for (const arg of args) {
        // Chromium reads a switch with one dash as with two. (A
        // launchOptions.proxy.bypass is Playwright's: it adds <-loopback>
        // itself unless the list names a loopback host.)
        const m = typeof arg === 'string' && /^--?proxy-bypass-list=(.*)$/s.exec(arg);
        if (!m) continue;
        const rules = m[1].split(/[;,]/).map((r) => r.trim());
        if (!rules.includes('<-loopback>')) {
            throw new TypeError(
                `robotsgate-crawlee: ${arg} has no <-loopback>: Chromium would send every loopback site (localhost, 127.0.0.1) around robotsgate, unchecked; add ;<-loopback> to the list`,
            );
        }
    }
}

/**
 * keepSession detaches the session from a failed request's context, so that
 * Crawlee does not mark it bad (it calls session.markBad() on every failed
 * request after the handlers return, and retires it at maxErrorScore): an
 * answer of robotsgate's says nothing about the session.
 */
function keepSession(ctx) {
    ctx.session = undefined;
}

/**
 * prolongLock keeps the request's lock in Crawlee's request queue for the
 * wait, so that the queue does not hand the request to another task while
 * this one waits (RequestQueue's lock lasts the request handler's timeout
 * plus 5 s). A request from a RequestList has no lock.
 */
async function prolongLock(ctx, secs) {
    const client = ctx.crawler?.requestQueue?.client;
    if (typeof client?.prolongRequestLock !== 'function' || !ctx.request.id) return;
    try {
        await client.prolongRequestLock(ctx.request.id, { lockSecs: Math.ceil(secs) + 10 });
    } catch {
        // Not in this queue, or already handled: nothing to keep.
    }
}

module.exports = { RobotsGate, RobotsGateError, RobotsGateBlocked, RobotsGateRetry, BLOCKED, TEMPORARY, parseRetryAfter };
