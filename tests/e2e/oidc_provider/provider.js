// The OpenID provider of the sign-in browser test (tests/e2e/test_oidc_sign_in.py): a real
// `oidc-provider` (the certified Node implementation) with one confidential client, the
// accounts of a JSON file and a login and consent page of its own. Not for production.
//
// Everything comes from the environment (the client secret never on a command line):
//   MW_OIDC_CLIENT_ID, MW_OIDC_CLIENT_SECRET, MW_OIDC_REDIRECT_URI  the one client
//   MW_OIDC_ACCOUNTS  a JSON file {login: {password, sub, email, email_verified, name,
//                     given_name, family_name, preferred_username}}, read at every sign-in,
//                     so a test can change an account's e-mail between two sign-ins
//   MW_OIDC_HOST      the host name in the issuer (default localhost: another cookie jar
//                     than the relying party's 127.0.0.1, as a real provider would have)
// It listens on a free port of 127.0.0.1 and prints one JSON line, {"issuer": ...}, once
// it answers.

import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';

import Provider from 'oidc-provider';

const env = (name) => {
  const value = process.env[name];
  if (!value) {
    console.error(`provider.js: ${name} is not set`);
    process.exit(2);
  }
  return value;
};
const clientId = env('MW_OIDC_CLIENT_ID');
const clientSecret = env('MW_OIDC_CLIENT_SECRET');
const redirectUri = env('MW_OIDC_REDIRECT_URI');
const accountsFile = env('MW_OIDC_ACCOUNTS');
const host = process.env.MW_OIDC_HOST || 'localhost';

const accounts = () => JSON.parse(readFileSync(accountsFile, 'utf8'));
const bySub = (sub) => Object.values(accounts()).find((account) => account.sub === sub);

const escape = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const page = (title, body) => `<!doctype html><html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>${escape(title)}</title>
<style>body{font-family:sans-serif;max-width:26rem;margin:3rem auto;padding:0 1rem}
label{display:block;margin:.6rem 0}input{display:block;width:100%;padding:.4rem;box-sizing:border-box}
button{margin-top:.8rem;padding:.5rem 1rem}.error{color:#a00}</style></head>
<body><h1>Test IdP: ${escape(title)}</h1>${body}</body></html>`;

function loginPage(uid, error) {
  return page('Sign in', `${error ? `<p class="error">${escape(error)}</p>` : ''}
<form method="post" action="/interaction/${uid}/login" class="idp-login">
<label>Login <input name="login" autocomplete="username" autofocus></label>
<label>Password <input name="password" type="password" autocomplete="current-password"></label>
<button type="submit">Sign in</button></form>
<p><a href="/interaction/${uid}/abort" id="idp-cancel">Cancel</a></p>`);
}

function consentPage(uid, clientName, scopes) {
  return page('Authorize', `<p>${escape(clientName)} asks for: ${escape(scopes.join(', '))}.</p>
<form method="post" action="/interaction/${uid}/confirm" class="idp-consent">
<button type="submit">Allow</button></form>
<p><a href="/interaction/${uid}/abort" id="idp-cancel">Cancel</a></p>`);
}

async function formBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function send(res, status, html) {
  res.writeHead(status, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
  res.end(html);
}

// Our interactions: what devInteractions does, with a password that is checked.
async function interaction(provider, req, res, uid, action) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) return send(res, 400, page('Error', '<p>Unknown interaction.</p>'));
  const { prompt, params, session, grantId } = details;
  if (action === 'abort') {
    return provider.interactionFinished(req, res, {
      error: 'access_denied', error_description: 'The person cancelled the sign-in.',
    }, { mergeWithLastSubmission: false });
  }
  if (prompt.name === 'login') {
    if (action !== 'login' || req.method !== 'POST') return send(res, 200, loginPage(uid));
    const form = await formBody(req);
    const account = accounts()[form.get('login') || ''];
    if (!account || account.password !== form.get('password')) {
      return send(res, 200, loginPage(uid, 'Unknown login or wrong password.'));
    }
    return provider.interactionFinished(req, res, { login: { accountId: account.sub } },
      { mergeWithLastSubmission: false });
  }
  if (prompt.name === 'consent') {
    const scopes = [...(prompt.details.missingOIDCScope || [])];
    if (action !== 'confirm' || req.method !== 'POST') {
      return send(res, 200, consentPage(uid, params.client_id, scopes));
    }
    const grant = grantId ? await provider.Grant.find(grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
    if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
    return provider.interactionFinished(req, res, { consent: { grantId: await grant.save() } },
      { mergeWithLastSubmission: true });
  }
  return send(res, 501, page('Error', `<p>Prompt ${escape(prompt.name)} is not handled.</p>`));
}

const server = http.createServer();
server.listen(0, '127.0.0.1', () => {
  const issuer = `http://${host}:${server.address().port}`;
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const provider = new Provider(issuer, {
    clients: [{
      client_id: clientId,
      client_secret: clientSecret,
      redirect_uris: [redirectUri],
      response_types: ['code'],
      grant_types: ['authorization_code'],
      token_endpoint_auth_method: 'client_secret_basic',
    }],
    async findAccount(ctx, sub) {
      const account = bySub(sub);
      if (!account) return undefined;
      return {
        accountId: sub,
        async claims() {
          const current = bySub(sub) || account;
          const { password, ...claims } = current; // eslint-disable-line no-unused-vars
          return claims;
        },
      };
    },
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name', 'given_name', 'family_name', 'preferred_username'],
    },
    scopes: ['openid', 'email', 'profile'],
    jwks: { keys: [{ ...privateKey.export({ format: 'jwk' }), kid: 'test-1', alg: 'RS256', use: 'sig' }] },
    cookies: { keys: [randomBytes(32).toString('hex')] },
    features: { devInteractions: { enabled: false } },
    interactions: { url: (ctx, interactionInfo) => `/interaction/${interactionInfo.uid}` },
    // The relying party sends a PKCE challenge; requiring it proves that it does.
    pkce: { required: () => true },
  });
  const callback = provider.callback();
  server.on('request', (req, res) => {
    const match = /^\/interaction\/([^/?]+)(?:\/(login|confirm|abort))?(?:\?|$)/.exec(req.url);
    if (!match) return callback(req, res);
    return interaction(provider, req, res, match[1], match[2]).catch((error) => {
      send(res, 400, page('Error', `<p>${escape(error.message)}</p>`));
    });
  });
  console.log(JSON.stringify({ issuer }));
});
