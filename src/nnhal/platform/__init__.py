"""What every process side needs, below the HAL front end: shared memory pools
(``memory``: ashmem / mmap_fd / hardware_buffer), sync fences (``fence``),
fast message queues (``fmq``), burst packets (``burst_packets``) and polling
before blocking (``spin``).  Imports only ``nnhal.hal``."""
