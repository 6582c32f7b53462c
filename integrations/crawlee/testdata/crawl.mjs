// crawl.mjs runs one crawl through robotsgate for crawlee_test.go, as a user
// would write it: the crawler's options wrapped by RobotsGate.wrap. It reads
// its settings as JSON from argv[2] and writes what happened, as JSON, to the
// file settings.out:
//
//   seen      the URLs the request handler saw
//   failed    one entry per failedRequestHandler call: url, error name,
//             message, decision, rule, reason, retryCount
//   gate      RobotsGate's stats
//   crawlee   the crawl's final statistics (crawler.run's answer)
//   sessions  the session pool after the crawl: how many sessions were
//             retired, and every session's error score
import { writeFileSync } from 'node:fs';
import { CheerioCrawler, PlaywrightCrawler, ProxyConfiguration, Configuration } from 'crawlee';
import { RobotsGate } from '../index.js';

const settings = JSON.parse(process.argv[2]);
const seen = [];
const failed = [];

// Nothing of a crawl is kept on disk or shared between crawls.
Configuration.getGlobalConfig().set('persistStorage', false);

const gate = new RobotsGate({ maxRetryAfterSecs: settings.maxRetryAfterSecs ?? 300 });
// The user agent robotsgate obeys robots.txt for.
const userAgent = 'TestBot/1.0 (+https://example.org/bot)';
const userOptions = {
    proxyConfiguration: new ProxyConfiguration({ proxyUrls: [settings.proxy] }),
    maxRequestRetries: settings.maxRequestRetries ?? 2,
    maxConcurrency: settings.maxConcurrency ?? 4,
    // Crawlee's pool grows past minConcurrency only while it finds the
    // machine idle: a test that needs requests asked for together sets it.
    minConcurrency: settings.minConcurrency ?? 1,
    navigationTimeoutSecs: 30,
    requestHandlerTimeoutSecs: 30,
    preNavigationHooks: [
        (_ctx, gotOptions) => {
            // An HTTP crawler's (a browser crawler's is set at launch).
            if (gotOptions) gotOptions.headers = { ...gotOptions.headers, 'user-agent': userAgent };
            // settings.http2 false: got-scraping speaks HTTP/1.1, the
            // README's way to an https:// site on an IP address.
            if (gotOptions && settings.http2 === false) gotOptions.http2 = false;
        },
    ],
    async requestHandler({ request, enqueueLinks }) {
        seen.push(request.loadedUrl ?? request.url);
        await enqueueLinks({ strategy: 'same-origin' });
    },
    async failedRequestHandler({ request }, error) {
        failed.push({
            url: request.url,
            name: error.name,
            message: error.message,
            decision: error.decision ?? '',
            rule: error.rule ?? '',
            reason: error.reason ?? '',
            retryCount: request.retryCount,
        });
    },
};
if (settings.crawler === 'playwright') {
    Object.assign(userOptions, {
        headless: true,
        browserPoolOptions: { useFingerprints: false }, // keeps the user agent given
        launchContext: {
            userAgent,
            launchOptions: {
                executablePath: settings.chromium,
                args: settings.chromiumArgs ?? [],
                // The browser's own HOME, whose NSS store (.pki/nssdb) may
                // trust robotsgate's CA.
                env: settings.browserHome ? { ...process.env, HOME: settings.browserHome } : undefined,
            },
        },
    });
} else {
    userOptions.ignoreSslErrors = settings.ignoreSslErrors ?? true;
}
// settings.plain: the crawl without the gate, to show what it changes.
const options = settings.plain ? userOptions : gate.wrap(userOptions);
const crawler = settings.crawler === 'playwright' ? new PlaywrightCrawler(options) : new CheerioCrawler(options);

const crawlee = await crawler.run(settings.starts);
const pool = crawler.sessionPool?.getState();
const sessions = pool && {
    retired: pool.retiredSessionsCount,
    errorScores: pool.sessions.map((s) => s.errorScore),
};
writeFileSync(settings.out, JSON.stringify({ seen, failed, gate: gate.stats, crawlee, sessions }));
