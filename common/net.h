// Small socket helpers.
#pragma once

namespace logdex {

// A loopback TCP port that was free a moment ago (the OS picked it for a
// socket bound to port 0, then closed), or 0 when none could be had. For a
// child process that needs its port number up front (the demo's serve,
// Alertmanager and Prometheus in tests); another process may take it first,
// so the caller's start must fail loudly when it does.
int FreeLoopbackPort();

}  // namespace logdex
