// signoff dashboard: small enhancements only. Every page works without this file.
(function () {
  "use strict";

  // Times: shown in the viewer's time zone; the exact UTC stays in the title (hover).
  var withYear = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit"
  });
  var thisYear = new Intl.DateTimeFormat(undefined, {
    month: "short", day: "numeric", hour: "2-digit", minute: "2-digit"
  });
  function localizeTimes(root) {
    var times = root.querySelectorAll("time[datetime][data-local]");
    var year = new Date().getFullYear();
    for (var i = 0; i < times.length; i++) {
      var moment = new Date(times[i].getAttribute("datetime"));
      if (isNaN(moment)) { continue; }
      var format = moment.getFullYear() === year ? thisYear : withYear;
      times[i].textContent = format.format(moment);
    }
  }

  // Expiry countdowns, as the server words them ("4 h 38 min left").
  function duration(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    if (seconds < 60) { return seconds + " s"; }
    if (seconds < 3600) { return Math.floor(seconds / 60) + " min"; }
    if (seconds < 86400) {
      var hours = Math.floor(seconds / 3600), minutes = Math.floor(seconds / 60) % 60;
      return minutes && hours < 10 ? hours + " h " + minutes + " min" : hours + " h";
    }
    var days = Math.floor(seconds / 86400), rest = seconds % 86400;
    if (days >= 365) { return Math.floor(days / 365) + " y"; }
    return days < 7 && rest >= 3600 ? days + " d " + Math.floor(rest / 3600) + " h" : days + " d";
  }
  function tickCountdowns() {
    var counters = document.querySelectorAll("[data-countdown]");
    for (var i = 0; i < counters.length; i++) {
      var left = (new Date(counters[i].getAttribute("data-countdown")) - new Date()) / 1000;
      counters[i].textContent = left > 0 ? "(" + duration(left) + " left)" : "(expired)";
    }
  }

  // The waiting count in the title and the navigation, as the server wrote it
  // ("3", or "1,000+" past the count's cap).
  function showWaiting(count) {
    var title = document.title.replace(/^\([\d,]+\+?\) /, "");
    var none = !count || count === "0";
    document.title = none ? title : "(" + count + ") " + title;
    var badges = document.querySelectorAll("[data-waiting-count]");
    for (var i = 0; i < badges.length; i++) {
      badges[i].textContent = none ? "0" : count;
      badges[i].hidden = none;
    }
  }

  // Inbox: rows arrive and leave live (server-sent events, a slow poll as a fallback).
  function liveInbox(container) {
    var rowsUrl = container.getAttribute("data-rows-url") + window.location.search;
    var pending = null;
    var inFlight = false;
    function refresh() {
      if (inFlight) { pending = pending || setTimeout(refreshSoon, 300); return; }
      inFlight = true;
      fetch(rowsUrl, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (response) {
          if (response.redirected || !response.ok) { throw new Error("signed out"); }
          return response.text();
        })
        .then(function (html) {
          var focusedHref = focusedRowHref();
          var holder = document.createElement("div");
          holder.innerHTML = html;
          var list = holder.querySelector("#inbox-list");
          if (!list) { return; }
          container.replaceChild(list, container.querySelector("#inbox-list"));
          list.dispatchEvent(new CustomEvent("signoff:updated", { bubbles: true }));
          localizeTimes(list);
          showWaiting(list.getAttribute("data-waiting") || "0");
          restoreFocus(focusedHref);
        })
        .catch(function () { /* the next signal or poll tries again */ })
        .then(function () { inFlight = false; });
    }
    function refreshSoon() { pending = null; refresh(); }
    function schedule() { if (!pending) { pending = setTimeout(refreshSoon, 100); } }
    if (window.EventSource) {
      var source = new EventSource(container.getAttribute("data-events-url"));
      source.addEventListener("changed", schedule);
      source.addEventListener("open", schedule);
    }
    setInterval(refresh, window.EventSource ? 30000 : 5000);
  }

  // Keyboard: j/k move through the rows, Enter opens, a/r open approve or reject.
  var focusIndex = -1;
  function rows() { return document.querySelectorAll("[data-live-list] tr[data-row]"); }
  function focusedRowHref() {
    var all = rows();
    return focusIndex >= 0 && all[focusIndex] ? all[focusIndex].getAttribute("data-href") : null;
  }
  function focusRow(index, moveFocus) {
    var all = rows();
    if (!all.length) { focusIndex = -1; return; }
    focusIndex = Math.max(0, Math.min(index, all.length - 1));
    for (var i = 0; i < all.length; i++) { all[i].classList.toggle("is-focused", i === focusIndex); }
    if (moveFocus) { all[focusIndex].querySelector("a").focus(); }
  }
  function restoreFocus(href) {
    if (!href) { return; }
    var all = rows();
    for (var i = 0; i < all.length; i++) {
      if (all[i].getAttribute("data-href") === href) { focusRow(i, document.activeElement === document.body); return; }
    }
    focusRow(focusIndex, false);
  }
  function typing(target) {
    return target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
  }
  function onKey(event) {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) { return; }
    var key = event.key;
    if (key === "j") { focusRow(focusIndex + 1, true); }
    else if (key === "k") { focusRow(focusIndex < 0 ? 0 : focusIndex - 1, true); }
    else if ((key === "a" || key === "r") && focusedRowHref()) {
      // No "#decide" fragment: arriving at a fragment moves the focus to its target (or
      // the page), which would take it away from the comment box.
      window.location.href = focusedRowHref() + "?decide=" + (key === "a" ? "approve" : "reject");
    } else { return; }
    event.preventDefault();
  }
  function trackFocus(event) {
    var row = event.target.closest && event.target.closest("tr[data-row]");
    if (!row) { return; }
    var all = rows();
    for (var i = 0; i < all.length; i++) { if (all[i] === row) { focusRow(i, false); } }
  }

  // Request page: opened with ?decide=approve|reject, the comment box is ready to type.
  function prepareDecision(form) {
    var intent = form.getAttribute("data-intent");
    if (!intent) { return; }
    var box = form.querySelector("textarea");
    if (!box) { return; }
    box.focus({ preventScroll: true });
    var card = form.closest("section") || box;
    card.scrollIntoView({ block: "center" });
  }

  document.addEventListener("DOMContentLoaded", function () {
    localizeTimes(document);
    if (document.querySelector("[data-countdown]")) { tickCountdowns(); setInterval(tickCountdowns, 1000); }
    var live = document.querySelector("[data-live-list][data-rows-url]");
    if (live) { liveInbox(live); }
    if (document.querySelector("[data-live-list]")) {
      document.addEventListener("keydown", onKey);
      document.addEventListener("focusin", trackFocus);
    }
    var form = document.querySelector("[data-decide-form]");
    if (form) { prepareDecision(form); }
  });
})();
