// MissionWeave dashboard: live updates. Loaded after htmx, idiomorph's htmx extension
// and the htmx WebSocket extension, which holds the page's connection to
// /ws/dashboard/g/<group>/ (ws-connect) and reconnects it with backoff.
//
// The server sends only "this changed" (apps/dashboard/live.py):
//   <div id="mw-live-signal" hx-swap-oob="true" data-sequence="42"
//        data-missions="msn_1 msn_2" data-items="wi_1"></div>
// or, with data-catch-up instead of the ids, "anything may have changed" (sent on every
// connect, so a page that loaded or reconnected while commits happened catches up).
// Each live region re-fetches itself over HTTP, so the views keep every permission check:
//   <section id="items" data-live="group"|"" data-live-missions="…" data-live-items="…"
//            hx-get="<its page URL>" hx-select="#items" hx-target="this"
//            hx-swap="morph:outerHTML" hx-trigger="mw:changed">
// data-live="group" refreshes on any change; otherwise the region refreshes when a
// signal names one of its Missions or WorkItems (space-separated ids), and on a catch-up.
//
// Rule: forms live outside data-live regions. A region holding the focused field or a
// field with typed text is not refreshed (a morph would throw the typing away); it is
// marked data-live-stale and refreshed once the focus leaves it untouched.
(() => {
  const SIGNAL_ID = "mw-live-signal";

  // Per connection: a page may hold one per Group (the home page), each with its own
  // sequence; a single-Group page starts from the head it was rendered at (body).
  function seenSequence(socket) {
    return Number(socket.dataset.sequence || document.body.dataset.sequence || 0);
  }

  function ids(value) {
    return (value || "").split(" ").filter(Boolean);
  }

  function touches(region, signal) {
    if ("catchUp" in signal.dataset || region.dataset.live === "group") {
      return true;
    }
    const missions = ids(signal.dataset.missions);
    const items = ids(signal.dataset.items);
    return ids(region.dataset.liveMissions).some((id) => missions.includes(id))
      || ids(region.dataset.liveItems).some((id) => items.includes(id));
  }

  function edited(field) {
    if (field.type === "checkbox" || field.type === "radio") {
      return field.checked !== field.defaultChecked;
    }
    if (field.tagName === "SELECT") {
      const options = [...field.options];
      if (!field.multiple && !options.some((option) => option.defaultSelected)) {
        return field.selectedIndex > 0; // with nothing marked, the first is the default
      }
      return options.some((option) => option.selected !== option.defaultSelected);
    }
    return field.value !== field.defaultValue;
  }

  function busy(region) {
    const focused = document.activeElement;
    if (focused && region.contains(focused)
        && focused.matches("input, textarea, select, [contenteditable]")) {
      return true;
    }
    return [...region.querySelectorAll("input, textarea, select")].some(edited);
  }

  function refresh(regions) {
    // A region inside another one that refreshes comes along with it.
    const outermost = regions.filter(
      (region) => !regions.some((other) => other !== region && other.contains(region)));
    for (const region of outermost) {
      if (busy(region)) {
        region.dataset.liveStale = "";
        continue;
      }
      delete region.dataset.liveStale;
      // Not htmx.trigger: its events bubble, and would refresh enclosing regions too.
      region.dispatchEvent(new CustomEvent("mw:changed"));
      dismissMessages(MESSAGE_MS);
    }
  }

  // "Recorded: …" (base.html's ul.messages) is said once, on the page loaded right
  // after the action; once a live change re-renders the page, it no longer describes
  // what the page shows, and goes (left up a few seconds after the load, to be read).
  const MESSAGE_MS = 4000;
  function dismissMessages(readFor = 0) {
    const remove = () => {
      for (const messages of document.querySelectorAll("ul.messages")) {
        messages.remove();
      }
    };
    const left = readFor - performance.now(); // ms since this document's start
    if (left > 0) {
      setTimeout(remove, left);
    } else {
      remove();
    }
  }

  // A page being left (a form sent, a link followed) refreshes nothing more: its
  // requests would only race the next page's (and take its one-time messages).
  let leaving = false;
  window.addEventListener("submit", () => { leaving = true; });
  window.addEventListener("pagehide", () => { leaving = true; });
  window.addEventListener("pageshow", (event) => {
    leaving = false;
    if (event.persisted) {
      dismissMessages(); // back from the history: not the load right after the action
    }
  });

  // The signal is read here and its swap cancelled: nothing in the page is replaced,
  // so the page needs no #mw-live-signal element. Other frames go to htmx as usual.
  document.addEventListener("htmx:wsBeforeMessage", (event) => {
    const template = document.createElement("template");
    template.innerHTML = event.detail.message;
    const signal = template.content.getElementById(SIGNAL_ID);
    if (!signal) {
      return;
    }
    event.preventDefault();
    if (leaving) {
      return;
    }
    const sequence = Number(signal.dataset.sequence);
    const socket = event.target;
    if (!(sequence > seenSequence(socket))) {
      return; // the page already shows this (rendered at or after it)
    }
    socket.dataset.sequence = sequence;
    const regions = [...document.querySelectorAll("[data-live]")];
    refresh(regions.filter((region) => touches(region, signal)));
  });

  document.addEventListener("focusout", () => {
    // During focusout the focus has not moved yet: look once it has.
    setTimeout(() => refresh([...document.querySelectorAll("[data-live-stale]")]));
  });

  function showStatus(text) {
    const status = document.getElementById("live-status");
    if (status) {
      status.textContent = text;
      status.hidden = !text;
    }
  }

  document.addEventListener("htmx:wsOpen", () => showStatus(""));
  document.addEventListener("htmx:wsError", () => {
    showStatus("Live updates paused: reconnecting…");
  });
  document.addEventListener("htmx:wsClose", (event) => {
    // 4403: no longer a member; the extension does not reconnect after it.
    showStatus(event.detail.event.code === 4403
      ? "Live updates stopped: you are no longer a member of this Group. Reload the page."
      : "Live updates paused: reconnecting…");
  });
})();
