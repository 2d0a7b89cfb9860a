package auth

// MethodOIDC is single sign-on with an OpenID Provider (internal/identity): the
// provider's ID token proved who the user is; StartSession records the method.
const MethodOIDC Method = "oidc"
