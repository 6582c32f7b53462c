// unit.test.mjs: node --test for what index.js reads from robotsgate's
// answers without a crawl (crawlee_test.go's TestUnit runs it).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import http from 'node:http';
import { once } from 'node:events';
import { RobotsGate, RobotsGateBlocked, RobotsGateRetry, parseRetryAfter } from '../index.js';

test('parseRetryAfter', () => {
    assert.equal(parseRetryAfter('120'), 120);
    assert.equal(parseRetryAfter('0'), 0);
    assert.equal(parseRetryAfter(''), null);
    assert.equal(parseRetryAfter(undefined), null);
    assert.equal(parseRetryAfter('soon'), null);
    assert.equal(parseRetryAfter('-5'), null);
    assert.equal(parseRetryAfter('1.5'), null); // whole seconds only (RFC 9110)
    assert.equal(parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT'), 0); // past
    assert.equal(parseRetryAfter('Wednesday, 21-Oct-15 07:28:00 GMT'), 0);
    assert.equal(parseRetryAfter('Wed Oct 21 07:28:00 2015'), 0);
    assert.equal(parseRetryAfter('2015-10-21'), null);
    const inAMinute = new Date(Date.now() + 60_000).toUTCString();
    const secs = parseRetryAfter(inAMinute);
    assert.ok(secs >= 58 && secs <= 61, `${inAMinute}: ${secs}`);
});

// ctx is a crawling context with a response shaped as got's (an HTTP
// crawler's: a stream with statusCode and headers) or as Playwright's
// (methods).
function gotCtx(status, headers, body = '') {
    const response = Object.assign(Readable.from([Buffer.from(body)]), {
        statusCode: status,
        headers,
        url: 'http://site.example/x',
    });
    return { request: { url: 'http://site.example/x' }, response, session: {}, log: { info() {}, debug() {} } };
}

function playwrightCtx(status, headers, body = '') {
    const response = {
        status: () => status,
        headers: () => headers,
        url: () => 'http://site.example/x',
        text: async () => body,
    };
    return { request: { url: 'http://site.example/x' }, response, session: {}, log: { info() {}, debug() {} } };
}

for (const [name, make] of [['got', gotCtx], ['playwright', playwrightCtx]]) {
    test(`${name}: a block with a rule, one without, a temporary answer, a held one, the site's own`, async () => {
        const gate = new RobotsGate();
        const [hook] = gate.wrap({}).postNavigationHooks;

        let ctx = make(403, { 'x-robots-gate': 'disallowed', 'x-robots-gate-rule': 'disallow: /x (line 2)' });
        await assert.rejects(hook(ctx), (e) => e instanceof RobotsGateBlocked && e.rule === 'disallow: /x (line 2)' && e.status === 403);
        assert.equal(ctx.request.noRetry, true);

        ctx = make(403, { 'x-robots-gate': 'denied' }, 'robotsgate: http://site.example/x is denied\n\nreason:     "no crawling here"\n');
        await assert.rejects(hook(ctx), (e) => e instanceof RobotsGateBlocked && e.reason === '"no crawling here"' && e.rule === '');

        ctx = make(429, { 'x-robots-gate': 'paced', 'retry-after': '7' });
        await assert.rejects(hook(ctx), (e) => e instanceof RobotsGateRetry && e.retryAfterSecs === 7);
        assert.notEqual(ctx.request.noRetry, true);

        await hook(make(200, { 'x-robots-gate-held': '1.250' }));
        await hook(make(403, {})); // the site's own: Crawlee's to handle
        // Report mode: held, then would-block; both counted, as by Scrapy's.
        await hook(make(200, { 'x-robots-gate': 'Would-Block', 'x-robots-gate-held': '0.100' }));
        await hook(make(403, { 'x-robots-gate': 'constructor' })); // unknown: passed on, counted

        assert.deepEqual(gate.stats.answers, { disallowed: 1, denied: 1, paced: 1, 'would-block': 1, constructor: 1 });
        assert.equal(gate.stats.held, 2);
        assert.equal(gate.stats.heldSecs, 1.35); // to the millisecond, not 1.35000000000000009
    });

    // An upstream-error is retried, but not one whose reason is a
    // certificate that does not verify (robotsgate's two bodies for it, a
    // page's and its robots.txt's): no retry fixes that.
    test(`${name}: an upstream-error no retry fixes is not retried`, async () => {
        const gate = new RobotsGate();
        const [hook] = gate.wrap({}).postNavigationHooks;
        const final = [
            'upstream 127.0.0.1:8443: tls-verify: certificate signed by an unknown authority\n',
            'upstream site.example:443: tls-verify: certificate not valid for this host\n',
            'robotsgate: robots.txt could not be fetched: tls-verify: certificate expired or not yet valid; retrying will not help: add the site\'s CA to upstream.ca if you trust it and reload (SIGHUP) or restart robotsgate, which then fetches it at once; to retry now, POST /robots/purge?origin=https://site.example\n',
        ];
        for (const body of final) {
            const ctx = make(502, { 'x-robots-gate': 'upstream-error' }, body);
            await assert.rejects(hook(ctx), (e) => e instanceof RobotsGateBlocked && e.decision === 'upstream-error' && e.reason === body.trim().slice(0, 300) && /not retried/.test(e.message));
            assert.equal(ctx.request.noRetry, true, body);
        }
        for (const body of ['upstream site.example:443: refused: connection refused\n', 'upstream site.example:443: tls: TLS handshake failed\n', '']) {
            const ctx = make(502, { 'x-robots-gate': 'upstream-error' }, body);
            await assert.rejects(hook(ctx), (e) => e instanceof RobotsGateRetry && e.retryAfterSecs === null, body);
            assert.notEqual(ctx.request.noRetry, true, body);
        }
        // A site's own 502 saying the same is the site's: not read.
        await hook(make(502, {}, 'upstream x: tls-verify: certificate signed by an unknown authority\n'));
        assert.deepEqual(gate.stats.answers, { 'upstream-error': 6 });
        // Retried to the end, the failure's log line gives the reason read
        // by the hook: the body is read once, not again from a spent stream.
        const ctx = make(502, { 'x-robots-gate': 'upstream-error' }, 'upstream site.example:443: refused: connection refused\n');
        await assert.rejects(hook(ctx), RobotsGateRetry);
        const logged = [];
        ctx.log.info = (line) => logged.push(line);
        assert.equal(await gate._failedEarly(ctx), true);
        assert.match(logged.join('\n'), /upstream site\.example:443: refused: connection refused/);
    });

    test(`${name}: X-Robots-Gate-Held only as robotsgate writes it`, async () => {
        const gate = new RobotsGate();
        const [hook] = gate.wrap({}).postNavigationHooks;
        // A site's own header reaches the crawler in tunnel mode, on a
        // bypassed host, or without robotsgate: only robotsgate's form counts.
        for (const bad of ['Infinity', '1e9', '12abc', '-1.000', '1.25', '1.2500', '.250', '1234567890.000', '0x10', '', '1.250 s']) {
            await hook(make(200, { 'x-robots-gate-held': bad }));
        }
        assert.equal(gate.stats.held, 0);
        assert.equal(gate.stats.heldSecs, 0);
        await hook(make(200, { 'x-robots-gate-held': ' 0.001 ' })); // whitespace around a header value is not the value's
        await hook(make(200, { 'x-robots-gate-held': '123456789.999' }));
        assert.equal(gate.stats.held, 2);
        assert.equal(gate.stats.heldSecs, 123456790);
    });
}

// An HTTP crawler's block body is read up to 8 KiB for its reason; the rest
// flows away unread, and the keep-alive connection it came on is used again
// (a for await's break would destroy the stream and close it).
test('got: a long block body keeps the connection', { timeout: 30_000 }, async (t) => {
    let connections = 0;
    const body = 'robotsgate: http://site.example/x is denied\n\nreason:     "no crawling here"\n' + 'x'.repeat(256 * 1024);
    const server = http.createServer((req, res) => {
        res.writeHead(403, { 'content-type': 'text/plain', 'x-robots-gate': 'denied' });
        res.end(body);
    });
    server.on('connection', () => connections++);
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    t.after(() => {
        agent.destroy();
        server.close();
    });
    const get = async () => {
        const req = http.get({ host: '127.0.0.1', port: server.address().port, path: '/x', agent });
        const [res] = await once(req, 'response');
        return res;
    };

    const gate = new RobotsGate();
    const [hook] = gate.wrap({}).postNavigationHooks;
    const response = await get();
    const ctx = { request: { url: 'http://site.example/x' }, response, session: {}, log: { info() {}, debug() {} } };
    await assert.rejects(hook(ctx), (e) => e instanceof RobotsGateBlocked && e.reason === '"no crawling here"');
    assert.equal(response.destroyed && !response.readableEnded, false, 'the stream was destroyed before its end');
    if (!response.readableEnded) await once(response, 'end');

    const again = await get();
    again.resume();
    await once(again, 'end');
    assert.equal(connections, 1, 'the second request came on a new connection');
});

test('errorHandler: yours first, then the wait; the session kept', async () => {
    const gate = new RobotsGate({ maxRetryAfterSecs: 0 });
    const calls = [];
    const { errorHandler, failedRequestHandler } = gate.wrap({
        errorHandler: (ctx, e) => calls.push(`error ${e.name} session=${ctx.session !== undefined}`),
        handleFailedRequestFunction: (ctx, e) => calls.push(`failed ${e.name} session=${ctx.session !== undefined}`),
    });
    const retry = new RobotsGateRetry('paced', { decision: 'paced', rule: '', reason: '', status: 429, url: 'u', retryAfterSecs: 30 });
    let ctx = gotCtx(429, {});
    await errorHandler(ctx, retry);
    assert.equal(ctx.session, undefined); // Crawlee's markBad() then finds none
    assert.equal(gate.stats.retries, 1);
    assert.equal(gate.stats.waitedSecs, 0); // cut to maxRetryAfterSecs

    ctx = gotCtx(500, {});
    const other = new Error('the site broke');
    await errorHandler(ctx, other);
    assert.notEqual(ctx.session, undefined); // not robotsgate's: Crawlee's

    ctx = gotCtx(429, {});
    await failedRequestHandler(ctx, retry);
    assert.equal(gate.stats.gaveUp, 1);
    assert.equal(ctx.session, undefined);
    assert.deepEqual(calls, ['error RobotsGateRetry session=true', 'error Error session=true', 'failed RobotsGateRetry session=true']);
});

test('wrap keeps your options and hooks, after its own', () => {
    const mine = () => {};
    const wrapped = new RobotsGate().wrap({ maxRequestRetries: 5, postNavigationHooks: [mine], handleFailedRequestFunction: mine });
    assert.equal(wrapped.maxRequestRetries, 5);
    assert.equal(wrapped.postNavigationHooks.length, 2);
    assert.equal(wrapped.postNavigationHooks[1], mine);
    assert.ok(!('handleFailedRequestFunction' in wrapped));
    assert.throws(() => new RobotsGate({ maxRetryAfterSecs: -1 }), /maxRetryAfterSecs/);
});

test('new RobotsGate throws for a name it does not take, naming the known ones', () => {
    assert.throws(() => new RobotsGate({ maxRetrAfterSecs: 5 }), {
        name: 'TypeError',
        message: 'robotsgate-crawlee: new RobotsGate() has no setting "maxRetrAfterSecs"; did you mean maxRetryAfterSecs? (the settings: maxRetryAfterSecs)',
    });
    assert.throws(() => new RobotsGate({ maxretryaftersecs: 5 }), /did you mean maxRetryAfterSecs\?/);
    assert.throws(() => new RobotsGate({ proxyUrl: 'http://127.0.0.1:8080' }), (e) => !/did you mean/.test(e.message) && /no setting "proxyUrl" \(the settings: maxRetryAfterSecs\)/.test(e.message));
    assert.throws(() => new RobotsGate(300), /takes an object/);
    assert.throws(() => new RobotsGate(null), /takes an object/);
    assert.equal(new RobotsGate().maxRetryAfterSecs, 300);
    assert.equal(new RobotsGate(undefined).maxRetryAfterSecs, 300);
    assert.equal(new RobotsGate({ maxRetryAfterSecs: 5 }).maxRetryAfterSecs, 5);
});

// A --proxy-bypass-list without <-loopback> sends every loopback site
// around the proxy (Chromium bypasses loopback unless told not to, and the
// list replaces Playwright's <-loopback>): wrap refuses it.
test('wrap refuses a bypass list that would send loopback sites around robotsgate', () => {
    const launch = (...args) => ({ launchContext: { launchOptions: { args } } });
    const hosts = 'update.googleapis.com;clients2.google.com;accounts.google.com;safebrowsing.googleapis.com';
    assert.throws(() => new RobotsGate().wrap(launch('--headless', `--proxy-bypass-list=${hosts}`)), {
        name: 'TypeError',
        message: `robotsgate-crawlee: --proxy-bypass-list=${hosts} has no <-loopback>: Chromium would send every loopback site (localhost, 127.0.0.1) around robotsgate, unchecked; add ;<-loopback> to the list`,
    });
    assert.throws(() => new RobotsGate().wrap(launch('--proxy-bypass-list=<loopback>')), /no <-loopback>/);
    assert.throws(() => new RobotsGate().wrap(launch(`-proxy-bypass-list=${hosts}`)), /no <-loopback>/); // Chromium's one-dash spelling
    for (const ok of [`--proxy-bypass-list=${hosts};<-loopback>`, '--proxy-bypass-list=<-loopback>', '--proxy-bypass-list=a.example, <-loopback>']) {
        assert.ok(new RobotsGate().wrap(launch(ok)).launchContext, ok);
    }
    assert.ok(new RobotsGate().wrap(launch('--proxy-server=http://127.0.0.1:8080')));
    assert.ok(new RobotsGate().wrap({ launchContext: {} }));
});
