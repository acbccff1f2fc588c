// Package xdp is Bulwark's first line of defence: an XDP program that
// filters packets in the driver (or the kernel's generic hook) before a
// socket buffer exists, and the userspace Manager that loads it, mirrors
// the allow and deny lists into its maps and decides defense mode.
//
// # The program (bpf/bulwark.c)
//
// For every frame it parses Ethernet, up to two VLAN tags (802.1Q and
// 802.1ad), IPv4 or IPv6 with up to six extension headers (hop-by-hop,
// routing, destination options, fragment, AH: a flood hidden behind them
// is still scored), then TCP or UDP, and decides:
//
//  1. deny list: exact address (LRU with expiry, 1,000,000, in front of
//     which an array index per family holds the exact addresses in hashed
//     buckets, 7 slots in a 64-byte cache line for IPv4 and 4 for IPv6,
//     matched without a helper call; the LRU is asked only
//     for a bucket that overflowed) then CIDR (LPM tries, IPv4 and IPv6,
//     sized like the list): a hit drops, unless the
//     allow list (exact hash, 65,536, then CIDR tries) has the source. An
//     allowed source is never dropped nor answered by the proxy, whatever
//     the prefix lengths (allow beats deny); the allow list is consulted
//     only when a packet would be, so the pass path does not pay for it.
//     An expired entry never matches, and an expired prefix never hides a
//     live shorter one;
//  2. one bit per IPv4 /16 summarizes each list: a source whose /16 holds
//     no entry skips the lookups, and a /16 wholly inside a never-expiring
//     prefix of /16 or shorter matches on its bit alone; one bit per IPv4
//     /24 (FULL rows) marks the /24s inside never-expiring prefixes of /17
//     to /24, the bulk of most blocklists, matched without walking the
//     trie. Only prefixes with an expiry and those longer than /24 take
//     the trie, and only for sources of the /16s (or /24s) the TRIE rows
//     mark; an IPv6 source takes it only when a bit of its top 16 bits or
//     of a hash of its /32 says a prefix may hold it (8.5 MiB of rows for
//     both lists);
//  3. fragments are dropped ([FlagDropFragments]): their later parts carry
//     no L4 header to check;
//  4. TCP: SYNs are scored per source (IPv6 per /64, per CPU) with
//     exponential decay and dropped above a limit, tighter in defense
//     mode ([FlagSYNFlood]); in defense mode ([FlagSYNProxy]) or always
//     ([FlagSYNProxyAlways]) a SYN is answered in XDP with a syncookie
//     SYN-ACK (bpf_tcp_raw_gen_syncookie_ipv4/6, sent with XDP_TX), and an
//     ACK passes only if it carries a valid cookie
//     (bpf_tcp_raw_check_syncookie_ipv4/6), belongs to a flow verified
//     before (the conntrack LRU) or to a kernel socket; other ACKs are
//     scored and dropped ([FlagACKFlood]); RSTs outside the receiving
//     socket's window, or for no connection, are scored and dropped
//     ([FlagRSTValidate]);
//  5. UDP: per-port packet and byte counts ([FlagUDPStats]) and limits
//     ([FlagUDPRateLimit], [Config.UDPLimits]).
//
// Bad input is dropped and counted as malformed: a truncated IP, TCP or
// UDP header, a bad IP version or header length, an IP length beyond the
// frame, a TCP data offset below 5 or beyond the packet, SYN with FIN or
// RST, an IPv6 header chain longer than six headers or 2 KiB. Anything
// that is not IPv4 or IPv6 (ARP, LLDP, a third VLAN tag) passes.
//
// # The SYN proxy and the kernel
//
// A cookie ACK the program passes is accepted by the kernel's own
// syncookie code, which needs net.ipv4.tcp_syncookies=2 (Status.Warnings
// says so otherwise) and a listener that sent a cookie itself in the last
// two minutes. So while proxying, one SYN per destination port every
// [Config.KernelSYNInterval] goes to the kernel, which answers it with its
// own cookie; the kernel must be able to route that answer (any server
// with a default route can). The resulting connections have no window
// scaling, SACK or timestamps, as with any syncookie.
//
// # The manager
//
// [Manager.Start] loads the program, attaches it (auto: native, then
// generic, then none: it logs why and keeps serving without XDP; the
// status says so), copies the lists into the maps and from then on
// mirrors every list change ([Manager.OnChange] as the lists'
// ipset.Config.OnChange). Every [Config.Interval] it reads the per-CPU
// counters and feeds the SYN rate to a [Detector] (Welford mean and σ,
// defense above mean + K·σ, left with hysteresis). Ring-buffer events and
// defense transitions go to [Config.OnEvent]; logs and metrics are the
// caller's. The list maps are pinned under /sys/fs/bpf/bulwark/<iface>
// when that is a BPF filesystem, so a restart keeps the deny list: entries
// missing from the new process's lists are restored into them.
// [Manager.Stop] detaches.
//
// The package knows no API: [Manager.Status] and [Manager.Update] are
// what the gateway's control routes (GET /v1/xdp/status, PUT and POST
// /v1/xdp/config, the seed's /v1/xdp/blacklist and whitelist over the
// gateway's lists; gateway.XDPRoutes) adapt to HTTP.
//
// The package builds everywhere; off Linux, Start reports "unsupported"
// (and serves without XDP). cilium/ebpf is imported only here.
//
// # Regenerating
//
// The object files and their Go bindings are generated by bpf2go (go
// generate) with clang 14 and committed; TestGeneratedUpToDate rebuilds
// them and fails on any difference when clang is installed.
package xdp
