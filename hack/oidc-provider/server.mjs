// A real OpenID provider for the console's tests: npm oidc-provider (pinned in package-lock.json) over HTTPS.
// Usage: node server.mjs CONFIG.json  (run from the install folder that hack/setup-console.sh prepares).
// CONFIG: {port, issuer, cert, key, jwk, client: {id, secret, redirectUri},
//          accounts: {login: {groups: [...], idTokenTtl?: seconds, refreshTokenTtl?: seconds}}}
// Sign-in uses the provider's own development login form; the account table decides each login's groups and,
// for the refresh tests, how long its ID and refresh tokens live. Refresh tokens are issued at every sign-in
// (as Keycloak does; oidc-provider's default wants the offline_access scope) and rotated at every use (the
// strictest provider: a refresh token used twice revokes the grant).
import { readFileSync } from "node:fs";
import https from "node:https";
import { randomBytes } from "node:crypto";
import Provider from "oidc-provider";

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
const accounts = config.accounts || {};

const provider = new Provider(config.issuer, {
  clients: [{
    client_id: config.client.id,
    client_secret: config.client.secret,
    redirect_uris: [config.client.redirectUri],
    grant_types: ["authorization_code", "refresh_token"],
    response_types: ["code"],
    token_endpoint_auth_method: "client_secret_basic",
  }],
  jwks: { keys: [config.jwk] },
  cookies: { keys: [randomBytes(32).toString("hex")] },
  scopes: ["openid", "profile", "groups"],
  claims: { openid: ["sub"], profile: ["preferred_username", "name"], groups: ["groups"] },
  conformIdTokenClaims: false, // the groups claim goes into the ID token, which the API server reads
  features: { devInteractions: { enabled: true } },
  pkce: { required: () => true },
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed("refresh_token"),
  rotateRefreshToken: true,
  ttl: {
    IdToken: (ctx, token) => (accounts[token.available?.sub] || {}).idTokenTtl || 3600,
    RefreshToken: (ctx, token) => (accounts[token.accountId] || {}).refreshTokenTtl || 14 * 24 * 3600,
  },
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims() {
        return { sub: id, preferred_username: id, name: id, groups: (accounts[id] || {}).groups || [] };
      },
    };
  },
  // First-party client: grant the requested scopes without a consent screen.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope("openid profile groups");
    grant.addOIDCClaims(["sub", "preferred_username", "name", "groups"]);
    await grant.save();
    return grant;
  },
});

const server = https.createServer({ cert: readFileSync(config.cert), key: readFileSync(config.key) }, provider.callback());
server.listen(config.port, "127.0.0.1", () => console.log(`oidc-provider listening on ${config.issuer}`));
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => server.close(() => process.exit(0)));
