/**
 * Preload for bench/profile.ts PROFILE_ALLOC=1 (issue 28 item 3, h28e): V8's sampling heap
 * profiler with the objects the scavenger and the mark-compactor collected included
 * (includeObjectsCollectedByMinorGC / MajorGC), so the profile counts every byte allocated in
 * the window, not only what survived it: the per-call garbage. The first SIGUSR2 starts sampling
 * (every IL_ALLOC_INTERVAL bytes on average, default 4096), the second stops it and writes the
 * profile (JSON of HeapProfiler.SamplingHeapProfile) to IL_ALLOC_OUT. The in-process inspector
 * session answers synchronously, so nothing else runs between the signal and the write.
 * IL_ALLOC_SURVIVORS=1 (h28k) leaves out what the scavenger collected: the profile then counts only
 * the bytes that outlived a young-generation collection (promoted, or alive at the end of the
 * window), which is what a scavenge pays to copy and the old generation later collects.
 */
'use strict';
const inspector = require('node:inspector');
const { writeFileSync } = require('node:fs');

const session = new inspector.Session();
session.connect();
let sampling = false;
process.on('SIGUSR2', () => {
  if (!sampling) {
    session.post('HeapProfiler.enable');
    session.post('HeapProfiler.startSampling', { samplingInterval: Number(process.env.IL_ALLOC_INTERVAL || 4096), includeObjectsCollectedByMinorGC: process.env.IL_ALLOC_SURVIVORS !== '1', includeObjectsCollectedByMajorGC: true });
    sampling = true;
    return;
  }
  session.post('HeapProfiler.stopSampling', (err, r) => {
    writeFileSync(process.env.IL_ALLOC_OUT, JSON.stringify(err ? { error: String(err) } : r.profile));
  });
  sampling = false;
});
