/*  Process-wide set-up for programs that use korch. */
#ifndef KORCH_KORCH_H
#define KORCH_KORCH_H

/* Read KORCH_LOG, keep czmq from taking over SIGINT/SIGTERM (korch turns
   Ctrl-C into a kernel interrupt), and make glibc return large freed
   buffers to the system at once: kernel output arrives in messages of tens
   of MB, and with glibc's adaptive mmap threshold those would stay in the
   heap after use. Call once, first thing in main. */
void korch_init(void);

#endif
