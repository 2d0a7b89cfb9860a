// vmgate web UI: passkeys (WebAuthn) on the log-in's second step and the Account
// page. The server's options come as JSON with binary fields in base64url; the
// browser's answer goes back the same way, in a hidden field of the form.
"use strict";

(function () {
  function b64uToBuf(s) {
    s = s.replace(/-/g, "+").replace(/_/g, "/");
    while (s.length % 4) { s += "="; }
    var bin = atob(s), out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) { out[i] = bin.charCodeAt(i); }
    return out.buffer;
  }
  function bufToB64u(buf) {
    var bytes = new Uint8Array(buf), bin = "";
    for (var i = 0; i < bytes.length; i++) { bin += String.fromCharCode(bytes[i]); }
    return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }
  function say(text) {
    var el = document.getElementById("passkey-status");
    if (el) { el.textContent = text; }
  }

  // The login's second step: the challenge from the API, the assertion into the form.
  function login(btn) {
    btn.addEventListener("click", function () {
      var form = btn.form;
      say("Waiting for the passkey…");
      fetch("/api/v1/user/login/second-factor/webauthn?ticket=" + encodeURIComponent(btn.dataset.ticket), {credentials: "omit"})
        .then(function (r) { return r.json(); })
        .then(function (env) {
          if (env.code !== 200) { throw new Error(env.message); }
          var pk = env.data.publicKey;
          pk.challenge = b64uToBuf(pk.challenge);
          (pk.allowCredentials || []).forEach(function (c) { c.id = b64uToBuf(c.id); });
          return navigator.credentials.get({publicKey: pk});
        })
        .then(function (cred) {
          form.elements.webauthn.value = JSON.stringify({
            id: cred.id, rawId: bufToB64u(cred.rawId), type: cred.type,
            response: {
              clientDataJSON: bufToB64u(cred.response.clientDataJSON),
              authenticatorData: bufToB64u(cred.response.authenticatorData),
              signature: bufToB64u(cred.response.signature),
              userHandle: cred.response.userHandle ? bufToB64u(cred.response.userHandle) : ""
            },
            clientExtensionResults: cred.getClientExtensionResults ? cred.getClientExtensionResults() : {}
          });
          form.submit();
        })
        .catch(function (e) { say("The passkey did not answer: " + e.message); });
    });
  }

  // The Account page: begin (a form post with the CSRF token), create, finish.
  function enrol(btn) {
    btn.addEventListener("click", function () {
      var form = btn.form;
      var body = new URLSearchParams();
      body.set("csrf", form.elements.csrf.value);
      say("Waiting for the passkey…");
      fetch(form.dataset.begin, {method: "POST", body: body, credentials: "same-origin"})
        .then(function (r) { if (!r.ok) { throw new Error("status " + r.status); } return r.json(); })
        .then(function (d) {
          form.elements.ticket.value = d.ticket;
          var pk = d.options.publicKey;
          pk.challenge = b64uToBuf(pk.challenge);
          pk.user.id = b64uToBuf(pk.user.id);
          (pk.excludeCredentials || []).forEach(function (c) { c.id = b64uToBuf(c.id); });
          return navigator.credentials.create({publicKey: pk});
        })
        .then(function (cred) {
          form.elements.credential.value = JSON.stringify({
            id: cred.id, rawId: bufToB64u(cred.rawId), type: cred.type,
            response: {
              clientDataJSON: bufToB64u(cred.response.clientDataJSON),
              attestationObject: bufToB64u(cred.response.attestationObject),
              transports: cred.response.getTransports ? cred.response.getTransports() : []
            },
            clientExtensionResults: cred.getClientExtensionResults ? cred.getClientExtensionResults() : {}
          });
          form.submit();
        })
        .catch(function (e) { say("The passkey was not added: " + e.message); });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var l = document.getElementById("passkey-login");
    if (l) { login(l); }
    var a = document.getElementById("passkey-add");
    if (a) { enrol(a); }
  });
})();
