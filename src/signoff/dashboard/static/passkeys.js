/* Passkeys (docs/passkeys.md): registering one, signing in with one, and signing a
   decision that needs one. The server hands out every challenge and checks every
   answer; this script only carries them between the page and the authenticator. */
(function () {
  "use strict";

  function toBytes(text) {
    var b64 = text.replace(/-/g, "+").replace(/_/g, "/");
    while (b64.length % 4) { b64 += "="; }
    var raw = atob(b64), out = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) { out[i] = raw.charCodeAt(i); }
    return out.buffer;
  }

  function toText(buffer) {
    var bytes = new Uint8Array(buffer), raw = "";
    for (var i = 0; i < bytes.length; i++) { raw += String.fromCharCode(bytes[i]); }
    return btoa(raw).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function withBytes(list) {
    return (list || []).map(function (c) { return Object.assign({}, c, { id: toBytes(c.id) }); });
  }

  function credentialJson(cred) {
    var r = cred.response, response = { clientDataJSON: toText(r.clientDataJSON) };
    if (r.attestationObject) {
      response.attestationObject = toText(r.attestationObject);
      response.transports = r.getTransports ? r.getTransports() : [];
    } else {
      response.authenticatorData = toText(r.authenticatorData);
      response.signature = toText(r.signature);
      if (r.userHandle) { response.userHandle = toText(r.userHandle); }
    }
    return JSON.stringify({
      id: cred.id, rawId: toText(cred.rawId), type: cred.type, response: response,
      clientExtensionResults: cred.getClientExtensionResults(),
      authenticatorAttachment: cred.authenticatorAttachment || undefined
    });
  }

  function options(url, fields) {
    var body = new URLSearchParams(fields);
    return fetch(url, { method: "POST", body: body, credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (res) {
        return res.json().then(function (data) {
          if (!res.ok) { throw new Error((data.error && data.error.message) || "The passkey could not be used."); }
          return data;
        });
      });
  }

  function say(form, message) {
    var box = form.querySelector("[data-passkey-status]");
    if (box) { box.textContent = message; box.hidden = !message; }
  }

  function assertion(url, fields) {
    return options(url, fields).then(function (o) {
      o.challenge = toBytes(o.challenge);
      o.allowCredentials = withBytes(o.allowCredentials);
      return navigator.credentials.get({ publicKey: o });
    });
  }

  function register(form) {
    form.addEventListener("submit", function (event) {
      if (form.elements.credential.value) { return; }
      event.preventDefault();
      say(form, "");
      options(form.getAttribute("data-options-url"), { csrf_token: form.elements.csrf_token.value })
        .then(function (o) {
          o.challenge = toBytes(o.challenge);
          o.user.id = toBytes(o.user.id);
          o.excludeCredentials = withBytes(o.excludeCredentials);
          return navigator.credentials.create({ publicKey: o });
        })
        .then(function (cred) { form.elements.credential.value = credentialJson(cred); form.submit(); })
        .catch(function (err) { say(form, err.message || "The passkey was not created."); });
    });
  }

  function signIn(form) {
    var button = form.querySelector("[data-passkey-button]");
    form.hidden = false;
    button.addEventListener("click", function () {
      say(form, "");
      assertion(form.getAttribute("data-options-url"), { csrf_token: form.elements.csrf_token.value })
        .then(function (cred) { form.elements.credential.value = credentialJson(cred); form.submit(); })
        .catch(function (err) { say(form, err.message || "No passkey was used."); });
    });
  }

  function decide(form) {
    form.addEventListener("submit", function (event) {
      if (form.elements.passkey_credential.value) { return; }
      event.preventDefault();
      var decision = (event.submitter && event.submitter.value) || "approve";
      say(form, "");
      assertion(form.getAttribute("data-passkey-options-url"), {
        csrf_token: form.elements.csrf_token.value, decision: decision
      })
        .then(function (cred) {
          form.elements.passkey_credential.value = credentialJson(cred);
          form.elements.passkey_decision.value = decision;
          form.submit();
        })
        .catch(function (err) { say(form, err.message || "No passkey was used."); });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (!window.PublicKeyCredential) { return; }
    document.querySelectorAll("[data-passkey-register]").forEach(register);
    document.querySelectorAll("[data-passkey-signin]").forEach(signIn);
    document.querySelectorAll("[data-passkey-decide]").forEach(decide);
  });
})();
