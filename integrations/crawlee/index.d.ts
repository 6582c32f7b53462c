// Types for robotsgate-crawlee (index.js): no import of Crawlee's, so that
// they fit any Crawlee 3 crawler's options.

/** The X-Robots-Gate decisions a request fails on, never retried. */
export declare const BLOCKED: ReadonlySet<string>;
/** The X-Robots-Gate decisions retried after their Retry-After. */
export declare const TEMPORARY: ReadonlySet<string>;

/** Seconds from a Retry-After value (seconds or an HTTP date); null if none. */
export declare function parseRetryAfter(value: string | undefined | null): number | null;

/** An answer robotsgate made itself, as the error a request failed with. */
export declare class RobotsGateError extends Error {
    /** The X-Robots-Gate value: `disallowed`, `paced`, ... */
    readonly decision: string;
    /** X-Robots-Gate-Rule, "" if none: `disallow: /private (line 2)`. */
    readonly rule: string;
    /** robotsgate's reason from its body, "" if none or a rule was given. */
    readonly reason: string;
    /** The status robotsgate answered with. */
    readonly status: number;
    /** The URL robotsgate answered for. */
    readonly url: string;
}

/**
 * A request robotsgate blocked, or answered `upstream-error` for a reason no
 * retry fixes (the site's certificate does not verify): failed at once,
 * never retried.
 */
export declare class RobotsGateBlocked extends RobotsGateError {}

/** An attempt robotsgate answered for the time being (`paced`, `unreachable`, ...). */
export declare class RobotsGateRetry extends RobotsGateError {
    /** Seconds from Retry-After, null without one. */
    readonly retryAfterSecs: number | null;
}

/** What new RobotsGate() takes; any other name throws a TypeError. */
export interface RobotsGateSettings {
    /** The longest wait for a Retry-After, in seconds (default 300). */
    maxRetryAfterSecs?: number;
}

export interface RobotsGateStats {
    /** Every answer robotsgate made itself, by its X-Robots-Gate value. */
    answers: Record<string, number>;
    /** Requests failed at once, never retried: blocks, and upstream errors no retry fixes. */
    blocked: number;
    /** Attempts retried after a temporary answer. */
    retries: number;
    /** Seconds waited for Retry-After, in all. */
    waitedSecs: number;
    /** Requests whose last attempt was a temporary answer when maxRequestRetries ran out. */
    gaveUp: number;
    /** Answers robotsgate held for pacing or a back-off (X-Robots-Gate-Held), allowed or would-block. */
    held: number;
    /** Seconds those answers were held, in all, to the millisecond. */
    heldSecs: number;
}

export declare class RobotsGate {
    constructor(settings?: RobotsGateSettings);
    readonly maxRetryAfterSecs: number;
    /** The counts, live: read them during or after the crawl. */
    readonly stats: RobotsGateStats;
    /**
     * A copy of a crawler's options (CheerioCrawler, PlaywrightCrawler, ...)
     * with the gate's post-navigation hook first, and errorHandler and
     * failedRequestHandler wrapped around yours.
     */
    wrap<T extends object>(options?: T): T;
}
