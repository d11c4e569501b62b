// A real OpenID Provider for gpuslice's sign-in tests: npm `oidc-provider` (OpenID-certified),
// started as `node oidc_idp.mjs CONFIG.json` by tests/idp/oidc.py. Config (JSON):
//   {"port": 0, "accounts_file": "...", "admin_token": "...", "clients": [<client metadata>],
//    "ttl": {"AccessToken": 600, ...}, "rotate_refresh_tokens": true}
// It listens on 127.0.0.1 (port 0: a free one) and prints one JSON line {"issuer", "port"} on
// stdout once it answers. Accounts are read from accounts_file on every lookup, so a test changes
// a user's claims, disables or removes them while the provider runs:
//   {"alice": {"sub": "...", "password": "...", "claims": {...}, "disabled": false}}
// Its own login page checks the password (the built-in devInteractions accepts any); consent is
// granted at once. Signing keys: two RSA keys; "key-1" signs and is published, and
// POST /_test/rotate-keys (Bearer admin_token) switches signing to "key-2", published from then on
// beside "key-1". Exits cleanly on SIGTERM.
import { generateKeyPairSync, randomBytes, sign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';

import Provider, { ExternalSigningKey, interactionPolicy } from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));

// A signing key whose "sign" operation is on only while it is the active one: the provider picks
// the first key allowed to sign, so switching `active` rotates keys without a restart.
class RotatingKey extends ExternalSigningKey {
  #pair;

  constructor(kid) {
    super();
    this.kid = kid;
    this.alg = 'RS256';
    this.active = false;
    this.published = false;
    this.#pair = generateKeyPairSync('rsa', { modulusLength: 2048 });
  }

  get key_ops() { return this.active ? ['sign', 'verify'] : ['verify']; }

  keyObject() { return this.#pair.publicKey; }

  async sign(data) { return sign('sha256', data, this.#pair.privateKey); }

  publicJwk() {
    return { ...this.#pair.publicKey.export({ format: 'jwk' }), kid: this.kid, alg: 'RS256', use: 'sig' };
  }
}

const keys = [new RotatingKey('key-1'), new RotatingKey('key-2')];
Object.assign(keys[0], { active: true, published: true });

function accounts() {
  return JSON.parse(readFileSync(config.accounts_file, 'utf8'));
}

function accountBySub(sub) {
  const found = Object.values(accounts()).find((account) => account.sub === sub);
  return found && !found.disabled ? found : undefined;
}

// A session whose account was disabled or removed since signs in again (the login page then
// refuses it), as an identity provider ends such a user's sessions.
const policy = interactionPolicy.base();
policy.get('login').checks.add(new interactionPolicy.Check(
  'account_gone', 'the account was disabled or removed',
  (ctx) => Boolean(ctx.oidc.session.accountId && !ctx.oidc.account),
), 0);

const html = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function page(title, body) {
  return `<!DOCTYPE html><html><head><meta charset="utf-8"><title>${html(title)}</title></head>`
    + `<body><h1>${html(title)}</h1>${body}</body></html>`;
}

function loginPage(uid, clientId, error) {
  return page('Sign in to the test identity provider', `
    <p>Client: <span id="client">${html(clientId)}</span></p>
    ${error ? `<p id="error" role="alert">${html(error)}</p>` : ''}
    <form method="post" action="/interaction/${html(uid)}/login" autocomplete="off">
      <label>Username <input name="login" required autofocus></label>
      <label>Password <input name="password" type="password" required></label>
      <button type="submit">Sign in</button>
    </form>`);
}

const server = createServer();
server.listen(config.port ?? 0, '127.0.0.1', start);

function start() {
  const { port } = server.address();
  const issuer = `http://127.0.0.1:${port}`;
  const provider = new Provider(issuer, {
    clients: config.clients,
    jwks: { keys },
    cookies: { keys: [randomBytes(32).toString('hex')] },
    findAccount: (ctx, sub) => {
      const account = accountBySub(sub);
      return account && { accountId: sub, claims: () => ({ ...account.claims, sub }) };
    },
    claims: {
      openid: ['sub'],
      profile: ['preferred_username', 'name'],
      email: ['email', 'email_verified'],
      groups: ['groups'],
    },
    scopes: ['openid', 'offline_access'],
    // The ID token carries the scopes' claims (groups included), not only userinfo.
    conformIdTokenClaims: false,
    pkce: { required: () => true },
    // Each refresh answers a new refresh token (as Entra and Okta do) unless the config says not
    // to; oidc-provider's own default rotates only public clients' tokens.
    rotateRefreshToken: () => config.rotate_refresh_tokens !== false,
    ttl: config.ttl ?? {},
    interactions: { policy, url: (ctx, interaction) => `/interaction/${interaction.uid}` },
    features: {
      devInteractions: { enabled: false },
      deviceFlow: { enabled: false },
      revocation: { enabled: true },
      backchannelLogout: { enabled: true },
      rpInitiatedLogout: { enabled: true, logoutSource, postLogoutSuccessSource },
      externalSigningSupport: { enabled: true, ack: 'experimental-01' },
    },
    // Back-channel logout tokens go to a client on 127.0.0.1, which the provider's SSRF guard
    // (a dispatcher that drops loopback sockets) would refuse: drop the guard for loopback only.
    fetch: (url, options) => {
      if (['127.0.0.1', 'localhost', '[::1]'].includes(new URL(url).hostname)) {
        delete options.dispatcher;
      }
      return globalThis.fetch(url, options);
    },
    renderError: (ctx, out) => {
      ctx.type = 'html';
      ctx.body = page('Sign-in error', Object.entries(out)
        .map(([key, value]) => `<p class="${html(key)}">${html(key)}: ${html(value)}</p>`).join(''));
    },
  });
  provider.on('server_error', (ctx, error) => console.error('server_error', error));
  provider.on('backchannel.error', (ctx, error, client) => console.error(
    `back-channel logout to ${client.clientId} failed:`, error));
  const app = provider.callback();
  server.on('request', (req, res) => route(provider, req, res, app).catch((error) => {
    console.error(error);
    if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
    res.end(`test provider error: ${error.message}\n`);
  }));
  process.stdout.write(`${JSON.stringify({ issuer, port })}\n`);
}

async function route(provider, req, res, app) {
  const url = new URL(req.url, 'http://127.0.0.1');
  const interaction = url.pathname.match(/^\/interaction\/([^/]+)(\/login)?$/);
  if (url.pathname === '/jwks' && req.method === 'GET') {
    send(res, 200, 'application/jwk-set+json',
      JSON.stringify({ keys: keys.filter((k) => k.published).reverse().map((k) => k.publicJwk()) }));
  } else if (url.pathname === '/_test/rotate-keys' && req.method === 'POST') {
    rotate(req, res);
  } else if (interaction && req.method === 'GET' && !interaction[2]) {
    await showInteraction(provider, req, res);
  } else if (interaction && req.method === 'POST' && interaction[2]) {
    await login(provider, req, res);
  } else {
    app(req, res);
  }
}

function rotate(req, res) {
  if (req.headers.authorization !== `Bearer ${config.admin_token}`) {
    send(res, 401, 'text/plain', 'admin token required\n');
    return;
  }
  const next = keys.find((k) => !k.active && !k.published);
  if (!next) {
    send(res, 409, 'text/plain', 'both keys are already in use: start a new provider\n');
    return;
  }
  keys.forEach((k) => { k.active = false; });
  Object.assign(next, { active: true, published: true });
  send(res, 200, 'application/json', JSON.stringify({ kid: next.kid }));
}

async function showInteraction(provider, req, res) {
  const details = await provider.interactionDetails(req, res);
  if (details.prompt.name === 'login') {
    send(res, 200, 'text/html', loginPage(details.uid, details.params.client_id));
    return;
  }
  await grantConsent(provider, req, res, details);
}

// Consent is given at once for what the client asked (offline_access included, which the
// provider only keeps when the request carried prompt=consent).
async function grantConsent(provider, req, res, details) {
  const { prompt: { details: missing }, params, session } = details;
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const grantId = await grant.save();
  const consent = details.grantId ? {} : { grantId };
  await provider.interactionFinished(req, res, { consent }, { mergeWithLastSubmission: true });
}

async function login(provider, req, res) {
  const details = await provider.interactionDetails(req, res);
  const form = new URLSearchParams(await body(req));
  const account = accounts()[form.get('login') ?? ''];
  if (!account || account.disabled || account.password !== form.get('password')) {
    const error = account?.disabled ? 'This account is disabled.' : 'Wrong username or password.';
    send(res, 401, 'text/html', loginPage(details.uid, details.params.client_id, error));
    return;
  }
  await provider.interactionFinished(req, res, { login: { accountId: account.sub } },
    { mergeWithLastSubmission: false });
}

async function logoutSource(ctx, form) {
  ctx.body = page('Sign out of the test identity provider?', `${form}
    <button type="submit" form="op.logoutForm" name="logout" value="yes">Yes, sign me out</button>
    <button type="submit" form="op.logoutForm">No, stay signed in</button>`);
}

async function postLogoutSuccessSource(ctx) {
  ctx.body = page('Signed out', '<p id="signed-out">You are signed out.</p>');
}

function body(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (chunk) => {
      size += chunk.length;
      if (size > 65536) reject(new Error('form too large'));
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function send(res, status, type, text) {
  res.writeHead(status, { 'content-type': `${type}; charset=utf-8`, 'cache-control': 'no-store' });
  res.end(text);
}

process.on('SIGTERM', () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
});
