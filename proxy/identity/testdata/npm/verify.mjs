// verify.mjs verifies requests as an origin received them with Cloudflare's
// published verifiers: http-message-sig 0.3.0's verifySignature (the
// dictionary form of Signature-Agent, draft-ietf-webbotauth-httpsig-protocol-01)
// and web-bot-auth 0.1.3's verify (over http-message-sig 0.2.0: the legacy
// string form). It reads {"directory": {"keys": [JWK...]}, "requests":
// [{"method", "url", "fields": [[name, value]...]}]} on stdin and writes, for
// each request, what each verifier said: "ok" or its error.
import { verifySignature } from "http-message-sig";
import { verify as webBotAuthVerify, jwkToKeyID, helpers } from "web-bot-auth";
import { verifierFromJWK } from "web-bot-auth/crypto";

const input = JSON.parse(await new Promise((resolve) => {
  let data = "";
  process.stdin.setEncoding("utf8");
  process.stdin.on("data", (c) => (data += c));
  process.stdin.on("end", () => resolve(data));
}));

// keyOf returns the directory's JWK whose thumbprint is keyid.
async function keyOf(keyid) {
  for (const jwk of input.directory.keys) {
    if ((await jwkToKeyID(jwk, helpers.WEBCRYPTO_SHA256, helpers.BASE64URL_DECODE)) === keyid) return jwk;
  }
  throw new Error(`no key ${keyid} in the directory`);
}

async function withHttpMessageSig(req) {
  const verified = await verifySignature(
    { kind: "request", method: req.method, targetUri: req.url, fields: req.fields.map(([name, value]) => ({ name, value })) },
    {
      policy: {
        algorithms: ["ed25519"],
        requiredComponents: ["@authority"],
        requiredParameters: ["created", "expires", "keyid", "tag"],
        clockSkew: 5,
      },
      async resolveVerifier(candidate) {
        if (candidate.parameters.tag !== "web-bot-auth") throw new Error(`tag ${candidate.parameters.tag}`);
        const jwk = await keyOf(candidate.parameters.keyid);
        const key = await crypto.subtle.importKey("jwk", { kty: jwk.kty, crv: jwk.crv, x: jwk.x }, { name: "Ed25519" }, false, ["verify"]);
        return { algorithm: "ed25519", verify: (base, sig) => crypto.subtle.verify({ name: "Ed25519" }, key, sig, base) };
      },
    },
  );
  return JSON.stringify(verified.components);
}

async function withWebBotAuth(req) {
  const headers = {};
  for (const [name, value] of req.fields) headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
  await webBotAuthVerify({ method: req.method, url: req.url, headers }, async (data, signature, params) => {
    const v = await verifierFromJWK(await keyOf(params.keyid));
    return v(data, signature, params);
  });
  return "ok";
}

async function attempt(f, req) {
  try {
    return { ok: true, detail: await f(req) };
  } catch (e) {
    return { ok: false, detail: String(e && e.message ? e.message : e) };
  }
}

const out = [];
for (const req of input.requests) {
  out.push({ httpMessageSig: await attempt(withHttpMessageSig, req), webBotAuth: await attempt(withWebBotAuth, req) });
}
process.stdout.write(JSON.stringify(out));
