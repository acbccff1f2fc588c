// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Bulwark's XDP program: the first line of defence, run by the driver (or
 * the generic hook) before the kernel allocates a socket buffer.
 *
 * For every frame: parse Ethernet, up to two VLAN tags, IPv4 or IPv6 (with
 * its extension headers), then
 *
 *   1. deny list (exact LRU, then CIDR tries): hit -> XDP_DROP, unless
 *      the allow list (exact hash, then CIDR tries) has the source: an
 *      allowed source is never dropped nor answered by the proxy, and the
 *      allow list is consulted only when it would be;
 *   2. (a one-bit-per-/16 summary of each IPv4 list lets most sources
 *      skip the lookups altogether, one-bit-per-/24 rows mark the /24s
 *      inside never-expiring prefixes of /17 to /24, matched without a
 *      trie walk, and the few /16s and /24s where only the trie can
 *      tell, so that a miss elsewhere skips it too; IPv6 sources skip
 *      the trie likewise unless a bit of their top 16 bits or of a hash
 *      of their /32 says a prefix may hold them; and
 *      array indexes of hashed buckets hold the exact IPv4 and IPv6 deny
 *      entries, matched without a helper call: the LRU map is consulted
 *      only for a bucket that overflowed);
 *   3. fragments -> XDP_DROP when F_DROP_FRAGMENTS is set;
 *   4. TCP: SYN scoring per source with exponential decay, the SYN proxy
 *      (a syncookie SYN-ACK built here and sent back with XDP_TX, the
 *      cookie ACK checked and passed to the kernel), RST sequence-window
 *      validation, invalid-ACK scoring;
 *   5. UDP: per-destination-port statistics and packet/byte limits.
 *
 * Entries carry an expiry on CLOCK_MONOTONIC (bpf_ktime_get_ns); an
 * expired entry never matches, and a CIDR lookup that lands on an expired
 * prefix retries with shorter prefixes, so an expired /24 never hides a
 * live /16. The userspace manager (package xdp) owns every map but the
 * scores, statistics and the flow cache, and keeps this file's structs
 * and constants in sync through the generated Go types.
 *
 * Verdicts for bad input (documented in package xdp): a frame shorter than
 * an Ethernet header, an IP header that is truncated, has a bad version or
 * header length or a total length beyond the frame, a TCP or UDP header
 * that is truncated, a TCP data offset below 5, SYN together with FIN or
 * RST, or an IPv6 header chain longer than MAX_EXT headers or MAX_L4 bytes
 * -> XDP_DROP (counted as malformed). Anything that is not IPv4 or IPv6
 * (ARP, LLDP, a third VLAN tag) -> XDP_PASS.
 */
#include "bpf.h"

char _license[] SEC("license") = "Dual BSD/GPL";

/* Flag word in config.flags. The first nine follow the seed's order. */
enum flag {
	F_SYN_FLOOD = 1 << 0,	     /* score SYNs per source, drop above the limit */
	F_SYN_PROXY = 1 << 1,	     /* answer SYNs with cookies in defense mode */
	F_RST_VALIDATE = 1 << 2,     /* drop RSTs outside the socket's window */
	F_ACK_FLOOD = 1 << 3,	     /* score invalid ACKs in defense mode */
	F_DEFENSE = 1 << 4,	     /* global defense mode (set by the manager) */
	F_UDP_STATS = 1 << 5,	     /* per-port UDP statistics */
	F_UDP_RATE_LIMIT = 1 << 6,   /* per-port UDP packet/byte limits */
	F_CIDR_LOOKUP = 1 << 7,	     /* consult the CIDR tries */
	F_DROP_FRAGMENTS = 1 << 8,   /* drop IPv4 and IPv6 fragments */
	F_SYN_PROXY_ALWAYS = 1 << 9, /* answer SYNs with cookies always */
};

/* Non-empty lists, in config.lists: lets the fast path skip lookups. */
enum list_bit {
	L_ALLOW = 1 << 0,
	L_DENY = 1 << 1,
	L_ALLOW4 = 1 << 2,
	L_ALLOW6 = 1 << 3,
	L_DENY4 = 1 << 4,
	L_DENY6 = 1 << 5,
};

/* Per-CPU counters, indexes into stats.c. */
enum counter {
	CNT_RX,		    /* frames seen */
	CNT_PASS,	    /* XDP_PASS verdicts */
	CNT_DROP,	    /* XDP_DROP verdicts */
	CNT_TX,		    /* XDP_TX verdicts (cookie SYN-ACKs) */
	CNT_ALLOW,	    /* passed by the allow list */
	CNT_DENY,	    /* dropped by the deny list */
	CNT_FRAGMENT,	    /* fragments dropped */
	CNT_MALFORMED,	    /* malformed or truncated frames dropped */
	CNT_SYN,	    /* SYNs (without ACK) seen */
	CNT_SYN_FLOOD,	    /* SYNs dropped by the per-source score */
	CNT_KERNEL_SYN,	    /* SYNs passed to the kernel while proxying */
	CNT_COOKIE_OK,	    /* ACKs with a valid cookie, passed */
	CNT_ACK_INVALID,    /* ACKs of no known flow, dropped */
	CNT_RST_INVALID,    /* RSTs outside the window, dropped */
	CNT_UDP_LIMIT,	    /* UDP datagrams over a port limit, dropped */
	CNT_FLOW_HIT,	    /* segments passed by the verified-flow cache */
	CNT_EVENTS_LOST,    /* events not delivered (ring full or budget) */
	CNT_ERRORS,	    /* helper failures (the frame was passed) */
	CNT_MAX,
};

/* Event kinds sent through the ring buffer. */
enum event_kind {
	EV_SYN_FLOOD = 1, /* a source crossed the SYN limit */
	EV_ACK_FLOOD = 2, /* a source crossed the invalid-ACK limit */
	EV_RST_FLOOD = 3, /* a source crossed the invalid-RST limit */
	EV_UDP_LIMIT = 4, /* a port started dropping in this window */
};

#define MAX_EXT 6	 /* IPv6 extension headers parsed */
#define MAX_L4 2048	 /* largest L4 offset accepted */
#define SCORE_ONE 256	 /* one packet, in score units */
#define SCORE_MAX 0x7fffffff
#define NSEC 1000000000ULL

struct config {
	__u32 flags;		 /* enum flag */
	__u32 lists;		 /* enum list_bit */
	__u32 syn_limit;	 /* SYN score limit per source and CPU */
	__u32 syn_limit_defense; /* the same in defense mode */
	__u32 ack_limit;	 /* invalid-ACK score limit */
	__u32 rst_limit;	 /* invalid-RST score limit (events only) */
	__u32 half_life_ms;	 /* score half-life */
	__u32 kernel_syn_ms;	 /* while proxying, pass one SYN per port this often */
	__u32 event_budget;	 /* events per CPU per second */
	__u32 synack_window;	 /* window in the cookie SYN-ACK */
	__u32 index_mult;	 /* deny_index: odd multiplier of the bucket hash */
	__u32 index_mask;	 /* deny_index: buckets - 1; 0 = no index, use the map */
	__u32 index6_mult;	 /* deny_index6: the same for IPv6 */
	__u32 index6_mask;
};

/* Value of every allow/deny map. */
struct list_val {
	__u64 expires; /* CLOCK_MONOTONIC ns; 0 = never */
	__u32 prefixlen;
	__u32 flags;
};

struct addr_key {
	__u32 a[4]; /* IPv6, or IPv4-mapped IPv6 (::ffff:a.b.c.d) */
};

struct lpm4_key {
	__u32 prefixlen;
	__u32 addr;
};

struct lpm6_key {
	__u32 prefixlen;
	__u32 addr[4];
};

struct score {
	__u64 syn_ts;
	__u64 ack_ts;
	__u64 rst_ts;
	__u32 syn;
	__u32 ack;
	__u32 rst;
	__u32 over; /* which limits the source is over (event dedupe) */
};

struct stats {
	__u64 c[CNT_MAX];
};

struct flow_key {
	__u32 saddr[4];
	__u32 daddr[4];
	__u16 sport;
	__u16 dport;
};

struct udp_limit {
	__u64 pps; /* 0 = none */
	__u64 bps; /* 0 = none */
};

struct udp_state {
	__u64 window; /* start of the current one-second window */
	__u64 pkts;
	__u64 bytes;
	__u64 over; /* window in which the port started dropping */
};

struct port_stats {
	__u64 pkts;
	__u64 bytes;
	__u64 drops;
};

/*
 * One bit per IPv4 /16, set while a list holds an entry inside or covering
 * that /16: a source whose bit is clear skips the lookups. A /16 wholly
 * inside a never-expiring prefix of /16 or shorter matches on its bit
 * alone (the FULL rows), so blocking big ranges costs no trie walk. The
 * TRIE rows mark the /16s that a prefix of /23 or shorter with an expiry
 * covers or falls in: only there (or in a /24 of summary24's TRIE rows)
 * does a source of a listed /16 need the trie.
 * Indexes: see enum summary_index.
 */
struct summary {
	__u64 w[1024];
};

enum summary_index {
	S_ALLOW_EXACT,
	S_ALLOW_CIDR,
	S_DENY_EXACT,
	S_DENY_CIDR,
	S_ALLOW_FULL, /* /16s wholly inside a never-expiring allowed prefix */
	S_DENY_FULL,  /* /16s wholly inside a never-expiring denied prefix */
	S_ALLOW_TRIE, /* /16s with an allowed prefix of /23 or shorter with an expiry */
	S_DENY_TRIE,  /* /16s with a denied prefix of /23 or shorter with an expiry */
	S_MAX,
};

struct ev_budget {
	__u64 window;
	__u64 count;
};

struct event {
	__u64 ts;
	__u32 kind; /* enum event_kind */
	__u32 value;
	__u32 addr[4];
	__u16 port;
	__u8 v6;
	__u8 pad[5];
};

/* Referenced so that their BTF (and so their generated Go names) exists. */
const enum counter *unused_counter __attribute__((unused));
const enum event_kind *unused_event_kind __attribute__((unused));
const enum flag *unused_flag __attribute__((unused));
const enum list_bit *unused_list_bit __attribute__((unused));
const struct event *unused_event __attribute__((unused));
const enum summary_index *unused_summary_index __attribute__((unused));

/* Map sizes here are the defaults; the manager sets them at load time. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct addr_key);
	__type(value, struct list_val);
} allow SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1000000);
	__type(key, struct addr_key);
	__type(value, struct list_val);
} deny SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm4_key);
	__type(value, struct list_val);
} allow_cidr4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm6_key);
	__type(value, struct list_val);
} allow_cidr6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1000000);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm4_key);
	__type(value, struct list_val);
} deny_cidr4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1000000);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm6_key);
	__type(value, struct list_val);
} deny_cidr6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 500000);
	__type(key, struct addr_key);
	__type(value, struct score);
} scores SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 2000000);
	__type(key, struct flow_key);
	__type(value, __u64);
} conntrack SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct udp_limit);
} udp_limits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct udp_state);
} udp_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct port_stats);
} port_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u64);
} syn_sample SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ev_budget);
} ev_budget SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, S_MAX);
	__type(key, __u32);
	__type(value, struct summary);
} summary4 SEC(".maps");

/*
 * Rows of one bit per IPv4 /24 (enum s24_row, S24_WORDS words each). FULL:
 * the /24 is wholly inside a never-expiring prefix of /17 to /24 of the
 * list, and matches on its bit alone (blocklists are mostly /24s, and a
 * bit test costs a fraction of an LPM trie walk). TRIE: the list's CIDR
 * map holds a prefix of /24 to /31 inside the /24 (with an expiry or
 * not), which only the trie can match. A source of a listed /16 whose /24
 * has neither bit, in a /16 without a TRIE bit, is not in the list: it
 * skips the trie.
 */
#define S24_WORDS (1 << 18)

enum s24_row {
	S24_ALLOW_FULL,
	S24_DENY_FULL,
	S24_ALLOW_TRIE,
	S24_DENY_TRIE,
	S24_ROWS,
};

const enum s24_row *unused_s24_row __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, S24_ROWS * S24_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} summary24 SEC(".maps");

/*
 * The IPv6 prefixes' summary, rows of S6_WORDS words per list (enum
 * s6_row). SHORT: one bit per value of an address's top 16 bits, set
 * while the list's CIDR map holds a prefix shorter than /32 in or
 * covering it. LONG: one bit per hash of the top 32 bits (S6_BITS bits),
 * set while it holds a prefix of /32 or longer whose /32 hashes there. A
 * source with neither bit is in no prefix of the list and skips the trie;
 * a bit shared by a hash collision only costs that trie walk.
 */
#define S6_BITS 20
#define S6_WORDS (1 << (S6_BITS - 6))
#define S6_MULT 2654435761u /* Knuth's multiplicative hash */

enum s6_row {
	S6_ALLOW_SHORT,
	S6_DENY_SHORT,
	S6_ALLOW_LONG,
	S6_DENY_LONG,
	S6_ROWS,
};

const enum s6_row *unused_s6_row __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, S6_ROWS * S6_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} summary6 SEC(".maps");

/*
 * The exact IPv4 deny entries, indexed: bucket index_bucket_of(addr)
 * holds up to INDEX_SLOTS of them with their expiry, so a hit or a miss
 * costs one array access and no helper call. The manager keeps it in step with the
 * deny map (every exact IPv4 entry is in its bucket, or the bucket is
 * marked over and the entry is in the map only); a miss in a bucket that
 * is not over is a miss of the map. deny_index6 does the same for the
 * exact IPv6 entries (not IPv4-mapped), with its own hash key and size.
 *
 * An IPv4 bucket is 64 bytes, a cache line's worth: 7 addresses and
 * their expiries, packed to 32 bits each, so 65,536 entries fit in 1 MiB
 * at the manager's sizing. (An mmapable array, whose values start on a
 * page, measured no faster in situ, rather slower, so it is not one.) A slot's expiry
 * is the entry's list_val.expires in units of 2^EXP_SHIFT ns (1.07 s),
 * plus one (0 = never): a slot whose unit is before the clock's is
 * expired, after it live, and in the same unit the map decides (its
 * expiry is exact), so the index never changes when an entry stops
 * matching.
 */
#define INDEX_SLOTS 7
#define INDEX6_SLOTS 4
#define EXP_SHIFT 30

struct index_bucket {
	__u32 addr[INDEX_SLOTS];   /* network order */
	__u32 expiry[INDEX_SLOTS]; /* (list_val.expires >> EXP_SHIFT) + 1; 0 = never */
	__u32 used;		   /* bit i: slot i holds an entry */
	__u32 over;		   /* nonzero: entries of this bucket are in the map only */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct index_bucket);
} deny_index SEC(".maps");

struct index6_bucket {
	__u32 addr[INDEX6_SLOTS][4]; /* network order */
	__u32 expiry[INDEX6_SLOTS];
	__u32 used;
	__u32 over;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct index6_bucket);
} deny_index6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} events SEC(".maps");

/* Parsed frame. Offsets are from the start of the frame. */
struct pkt {
	__u32 l3;     /* IP header (= length of the L2 header) */
	__u32 l4;     /* L4 header */
	__u32 l4end;  /* end of the IP payload */
	__u32 src[4]; /* IPv6, or IPv4-mapped */
	__u32 dst[4];
	__u8 v6;
	__u8 proto; /* L4 protocol after the extension headers */
	__u8 frag;  /* a fragment */
	__u8 later; /* a non-first fragment: no L4 header */
	__s8 allow; /* allow list verdict: -1 not looked up yet */
};

enum parse_result {
	P_IP,
	P_OTHER,
	P_MALFORMED,
};

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8

#define IPPROTO_HOPOPTS 0
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IPPROTO_ROUTING 43
#define IPPROTO_FRAGMENT 44
#define IPPROTO_AH 51
#define IPPROTO_DSTOPTS 60

#define TH_FIN 0x01
#define TH_SYN 0x02
#define TH_RST 0x04
#define TH_ACK 0x10

#define TCP_ESTABLISHED 1
#define TCP_SYN_SENT 2
#define TCP_LISTEN 10

static __always_inline int parse(void *data, void *end, struct pkt *p)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return P_MALFORMED;
	__u16 proto = eth->h_proto;
	__u32 off = sizeof(*eth);

#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		__be16 *vh = data + off;
		if ((void *)(vh + 2) > end)
			return P_MALFORMED;
		proto = vh[1];
		off += 4;
	}
	__u32 flen = end - data;

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = data + off;
		if ((void *)(ip + 1) > end)
			return P_MALFORMED;
		__u32 hl = ip->ihl * 4;
		__u32 tot = bpf_ntohs(ip->tot_len);
		if (ip->version != 4 || hl < sizeof(*ip) || tot < hl || off + tot > flen)
			return P_MALFORMED;
		p->l3 = off;
		p->l4 = off + hl;
		p->l4end = off + tot;
		p->src[2] = bpf_htonl(0xffff);
		p->src[3] = ip->saddr;
		p->dst[2] = bpf_htonl(0xffff);
		p->dst[3] = ip->daddr;
		__u16 fo = bpf_ntohs(ip->frag_off);
		p->frag = (fo & 0x3fff) != 0; /* MF or an offset */
		p->later = (fo & 0x1fff) != 0;
		p->proto = ip->protocol;
		return P_IP;
	}
	if (proto != bpf_htons(ETH_P_IPV6))
		return P_OTHER;

	struct ipv6hdr *ip6 = data + off;
	if ((void *)(ip6 + 1) > end)
		return P_MALFORMED;
	__u32 plen = bpf_ntohs(ip6->payload_len);
	if ((ip6->vtc >> 4) != 6 || plen == 0 || off + sizeof(*ip6) + plen > flen)
		return P_MALFORMED;
	p->v6 = 1;
	p->l3 = off;
	p->l4end = off + sizeof(*ip6) + plen;
	__builtin_memcpy(p->src, ip6->saddr, 16);
	__builtin_memcpy(p->dst, ip6->daddr, 16);

	__u8 nh = ip6->nexthdr;
	__u32 l4 = off + sizeof(*ip6);
#pragma unroll
	for (int i = 0; i < MAX_EXT; i++) {
		if (nh != IPPROTO_HOPOPTS && nh != IPPROTO_ROUTING && nh != IPPROTO_DSTOPTS &&
		    nh != IPPROTO_FRAGMENT && nh != IPPROTO_AH)
			break;
		if (l4 > MAX_L4)
			return P_MALFORMED;
		__u8 *h = data + l4;
		if ((void *)(h + 8) > end)
			return P_MALFORMED;
		if (nh == IPPROTO_FRAGMENT) {
			p->frag = 1;
			if ((((__u16)h[2] << 8 | h[3]) & 0xfff8) != 0)
				p->later = 1;
			l4 += 8;
		} else if (nh == IPPROTO_AH) {
			l4 += ((__u32)h[1] + 2) * 4;
		} else {
			l4 += ((__u32)h[1] + 1) * 8;
		}
		nh = h[0];
	}
	if (nh == IPPROTO_HOPOPTS || nh == IPPROTO_ROUTING || nh == IPPROTO_DSTOPTS ||
	    nh == IPPROTO_FRAGMENT || nh == IPPROTO_AH || l4 > MAX_L4 || l4 > p->l4end)
		return P_MALFORMED;
	p->l4 = l4;
	p->proto = nh;
	return P_IP;
}

static __always_inline int is_mapped(const __u32 *a)
{
	return a[0] == 0 && a[1] == 0 && a[2] == bpf_htonl(0xffff);
}

static __always_inline __u64 now_ns(__u64 *now)
{
	if (!*now)
		*now = bpf_ktime_get_ns();
	return *now;
}

/*
 * list_now is the clock of list expiries: CLOCK_MONOTONIC at the
 * resolution of a tick, which costs no clock read (bpf_ktime_get_ns is
 * most of an exact drop's cost under a paravirtual clock), so an entry
 * may still match up to one tick (1 to 4 ms) past its expiry.
 */
static __always_inline __u64 list_now(void)
{
	return bpf_ktime_get_coarse_ns();
}

static __always_inline int live(struct list_val *v)
{
	return v->expires == 0 || v->expires > list_now();
}

/* A CIDR lookup that skips expired prefixes: at most 4 lookups. */
static __always_inline int lpm4_hit(void *map, __u32 addr)
{
	struct lpm4_key k = {.prefixlen = 32, .addr = addr};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		struct list_val *v = bpf_map_lookup_elem(map, &k);
		if (!v)
			return 0;
		if (live(v))
			return 1;
		if (v->prefixlen == 0)
			return 0;
		k.prefixlen = v->prefixlen - 1;
	}
	return 0;
}

static __always_inline int lpm6_hit(void *map, const __u32 *addr)
{
	struct lpm6_key k = {.prefixlen = 128};
	__builtin_memcpy(k.addr, addr, 16);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		struct list_val *v = bpf_map_lookup_elem(map, &k);
		if (!v)
			return 0;
		if (live(v))
			return 1;
		if (v->prefixlen == 0)
			return 0;
		k.prefixlen = v->prefixlen - 1;
	}
	return 0;
}

static __always_inline int in_summary(__u32 idx, __be32 addr)
{
	struct summary *s = bpf_map_lookup_elem(&summary4, &idx);
	if (!s)
		return 1;
	__u32 hi = bpf_ntohl(addr) >> 16;
	return (s->w[(hi >> 6) & 1023] >> (hi & 63)) & 1;
}

/* row: enum s24_row. */
static __always_inline int in_summary24(__u32 row, __be32 addr)
{
	__u32 h = bpf_ntohl(addr) >> 8;
	__u32 idx = row * S24_WORDS + (h >> 6);
	__u64 *w = bpf_map_lookup_elem(&summary24, &idx);
	return w && ((*w >> (h & 63)) & 1);
}

static __always_inline int s6_bit(__u32 row, __u32 bit)
{
	__u32 idx = row * S6_WORDS + ((bit >> 6) & (S6_WORDS - 1));
	__u64 *w = bpf_map_lookup_elem(&summary6, &idx);
	return w && ((*w >> (bit & 63)) & 1);
}

/* in_summary6 reports whether an IPv6 source may be in a prefix of the list. */
static __always_inline int in_summary6(int in_allow, const __u32 *a)
{
	__u32 top = bpf_ntohl(a[0]);
	return s6_bit(in_allow ? S6_ALLOW_SHORT : S6_DENY_SHORT, top >> 16) ||
	       s6_bit(in_allow ? S6_ALLOW_LONG : S6_DENY_LONG, (a[0] * S6_MULT) >> (32 - S6_BITS));
}

/*
 * index_bucket_of is the indexes' hash of an address of n words (network
 * order read as host integers): h = (h ^ word) * mult for each word,
 * folded, masked.
 */
static __always_inline __u32 index_bucket_of(const __u32 *a, int n, __u32 mult, __u32 mask)
{
	__u32 h = 0;
#pragma unroll
	for (int w = 0; w < 4; w++)
		if (w < n)
			h = (h ^ a[w]) * mult;
	return (h ^ (h >> 16)) & mask;
}

/*
 * slot_live is the verdict of a slot's expiry: 1 live, 0 expired, -1 the
 * clock is in the slot's unit: ask the map.
 */
static __always_inline int slot_live(__u32 expiry)
{
	if (!expiry)
		return 1;
	__u64 t = (list_now() >> EXP_SHIFT) + 1;
	if (t < expiry)
		return 1;
	return t > expiry ? 0 : -1;
}

/*
 * index_hit looks an IPv4 source up in deny_index: 1 a live entry, 0 no
 * live entry (an expired one, or a miss in a bucket that is not over),
 * -1 ask the map.
 */
static __always_inline int index_hit(struct config *cfg, __be32 addr)
{
	if (!cfg->index_mask)
		return -1;
	__u32 i = index_bucket_of(&addr, 1, cfg->index_mult, cfg->index_mask);
	struct index_bucket *b = bpf_map_lookup_elem(&deny_index, &i);
	if (!b)
		return -1;
#pragma unroll
	for (int s = 0; s < INDEX_SLOTS; s++)
		if (((b->used >> s) & 1) && b->addr[s] == addr)
			return slot_live(b->expiry[s]);
	return b->over ? -1 : 0;
}

/* index6_hit is index_hit for an IPv6 source, in deny_index6. */
static __always_inline int index6_hit(struct config *cfg, const __u32 *a)
{
	if (!cfg->index6_mask)
		return -1;
	__u32 i = index_bucket_of(a, 4, cfg->index6_mult, cfg->index6_mask);
	struct index6_bucket *b = bpf_map_lookup_elem(&deny_index6, &i);
	if (!b)
		return -1;
	__u32 a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
#pragma unroll
	for (int s = 0; s < INDEX6_SLOTS; s++)
		if (((b->used >> s) & 1) && b->addr[s][0] == a0 && b->addr[s][1] == a1 &&
		    b->addr[s][2] == a2 && b->addr[s][3] == a3)
			return slot_live(b->expiry[s]);
	return b->over ? -1 : 0;
}

static __always_inline int listed(struct config *cfg, struct pkt *p, void *exact, void *cidr4,
				  void *cidr6, __u32 bexact, __u32 b4, __u32 b6, __u32 sidx)
{
	int v4 = is_mapped(p->src);
	if (v4 && (cfg->flags & F_CIDR_LOOKUP) && (cfg->lists & b4) &&
	    in_summary(sidx == S_ALLOW_EXACT ? S_ALLOW_FULL : S_DENY_FULL, p->src[3]))
		return 1;
	if ((cfg->lists & bexact) && (!v4 || in_summary(sidx, p->src[3]))) {
		int r = -1;
		if (sidx == S_DENY_EXACT)
			r = v4 ? index_hit(cfg, p->src[3]) : index6_hit(cfg, p->src);
		if (r > 0)
			return 1;
		if (r < 0) {
			struct list_val *v = bpf_map_lookup_elem(exact, p->src);
			if (v && live(v))
				return 1;
		}
	}
	if (!(cfg->flags & F_CIDR_LOOKUP))
		return 0;
	int in_allow = sidx == S_ALLOW_EXACT;
	if (v4) {
		__be32 a = p->src[3];
		if (!(cfg->lists & b4) || !in_summary(sidx + 1, a))
			return 0;
		if (in_summary24(in_allow ? S24_ALLOW_FULL : S24_DENY_FULL, a))
			return 1;
		/* Only a prefix with an expiry or longer than /24 needs the trie. */
		return (in_summary(in_allow ? S_ALLOW_TRIE : S_DENY_TRIE, a) ||
			in_summary24(in_allow ? S24_ALLOW_TRIE : S24_DENY_TRIE, a)) &&
		       lpm4_hit(cidr4, a);
	}
	return (cfg->lists & b6) && in_summary6(in_allow, p->src) && lpm6_hit(cidr6, p->src);
}

/*
 * allowed reports whether the source is on the allow list, looking it up
 * once per packet. It is consulted only before a packet would be dropped
 * or answered by the proxy: an allowed source is never either, and the
 * pass path does not pay for the lookup.
 */
static __always_inline int allowed(struct config *cfg, struct stats *st, struct pkt *p)
{
	if (p->allow < 0) {
		p->allow = listed(cfg, p, &allow, &allow_cidr4, &allow_cidr6, L_ALLOW, L_ALLOW4,
				  L_ALLOW6, S_ALLOW_EXACT);
		if (p->allow)
			st->c[CNT_ALLOW]++;
	}
	return p->allow;
}

static __always_inline void emit(struct config *cfg, struct stats *st, __u32 kind, struct pkt *p,
				 __u16 port, __u32 value, __u64 now)
{
	__u32 zero = 0;
	struct ev_budget *b = bpf_map_lookup_elem(&ev_budget, &zero);
	if (!b)
		return;
	if (now - b->window >= NSEC) {
		b->window = now;
		b->count = 0;
	}
	if (b->count >= cfg->event_budget) {
		st->c[CNT_EVENTS_LOST]++;
		return;
	}
	b->count++;
	struct event e = {.ts = now, .kind = kind, .value = value, .port = port, .v6 = p->v6};
	if (kind != EV_UDP_LIMIT)
		__builtin_memcpy(e.addr, p->src, 16);
	if (bpf_ringbuf_output(&events, &e, sizeof(e), 0))
		st->c[CNT_EVENTS_LOST]++;
}

/*
 * decay returns s after dt nanoseconds with half-life hl: halved once per
 * full half-life, then linearly between halvings (exact at every
 * half-life, within 6% in between).
 */
static __always_inline __u32 decay(__u32 s, __u64 dt, __u64 hl)
{
	if (s == 0)
		return 0;
	__u64 n = dt / hl;
	if (n >= 32)
		return 0;
	s >>= n;
	__u64 rem = (dt - n * hl) >> 10; /* ~microseconds, keeps the product in 64 bits */
	__u64 h2 = (hl >> 10) * 2;
	return s - (__u32)(((__u64)s * rem) / h2);
}

/* score adds one packet to a source's score and returns the new value. */
static __always_inline __u32 score_add(__u32 *s, __u64 *ts, __u64 now, __u64 hl)
{
	__u64 dt = now > *ts ? now - *ts : 0;
	__u32 v = decay(*s, dt, hl);
	v = v > SCORE_MAX - SCORE_ONE ? SCORE_MAX : v + SCORE_ONE;
	*s = v;
	*ts = now;
	return v;
}

enum score_kind {
	S_SYN,
	S_ACK,
	S_RST,
};

/*
 * bump adds a packet of kind to the source's per-CPU score and reports
 * whether the source is now over limit (0 = no limit). The first crossing
 * sends an event; the source re-arms once its score fell below half.
 */
static __always_inline int bump(struct config *cfg, struct stats *st, struct pkt *p, int kind,
				__u32 limit, __u64 now)
{
	struct addr_key k;
	__builtin_memcpy(k.a, p->src, 16);
	if (!is_mapped(p->src)) {
		k.a[2] = 0; /* IPv6 sources are scored per /64 */
		k.a[3] = 0;
	}
	__u64 hl = (__u64)cfg->half_life_ms * 1000000;
	if (hl < 1000000)
		hl = 1000000;
	struct score *s = bpf_map_lookup_elem(&scores, &k);
	if (!s) {
		struct score init = {};
		bpf_map_update_elem(&scores, &k, &init, BPF_ANY);
		s = bpf_map_lookup_elem(&scores, &k);
		if (!s)
			return 0;
	}
	__u32 v, bit, ev;
	if (kind == S_SYN) {
		v = score_add(&s->syn, &s->syn_ts, now, hl);
		bit = 1;
		ev = EV_SYN_FLOOD;
	} else if (kind == S_ACK) {
		v = score_add(&s->ack, &s->ack_ts, now, hl);
		bit = 2;
		ev = EV_ACK_FLOOD;
	} else {
		v = score_add(&s->rst, &s->rst_ts, now, hl);
		bit = 4;
		ev = EV_RST_FLOOD;
	}
	if (limit == 0)
		return 0;
	__u64 lim = (__u64)limit * SCORE_ONE;
	if (v > lim) {
		if (!(s->over & bit)) {
			s->over |= bit;
			emit(cfg, st, ev, p, 0, v / SCORE_ONE, now);
		}
		return 1;
	}
	if (v < lim / 2)
		s->over &= ~bit;
	return 0;
}

static __always_inline void flow_key(struct flow_key *k, struct pkt *p, struct tcphdr *th)
{
	__builtin_memcpy(k->saddr, p->src, 16);
	__builtin_memcpy(k->daddr, p->dst, 16);
	k->sport = th->source;
	k->dport = th->dest;
}

/* Socket states the RST check needs. */
struct sock_info {
	int state; /* -1: no socket */
	int full;  /* rcv_nxt and rcv_wnd are set */
	__u32 rcv_nxt;
	__u32 rcv_wnd;
};

static __always_inline void sock_lookup(struct xdp_md *ctx, struct pkt *p, struct tcphdr *th,
					struct sock_info *si)
{
	struct bpf_sock_tuple t = {};
	struct bpf_sock *sk;
	si->state = -1;
	if (is_mapped(p->src) && is_mapped(p->dst)) {
		t.ipv4.saddr = p->src[3];
		t.ipv4.daddr = p->dst[3];
		t.ipv4.sport = th->source;
		t.ipv4.dport = th->dest;
		sk = bpf_skc_lookup_tcp(ctx, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
	} else {
		__builtin_memcpy(t.ipv6.saddr, p->src, 16);
		__builtin_memcpy(t.ipv6.daddr, p->dst, 16);
		t.ipv6.sport = th->source;
		t.ipv6.dport = th->dest;
		sk = bpf_skc_lookup_tcp(ctx, &t, sizeof(t.ipv6), BPF_F_CURRENT_NETNS, 0);
	}
	if (!sk)
		return;
	si->state = sk->state;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (tp) {
		si->full = 1;
		si->rcv_nxt = tp->rcv_nxt;
		si->rcv_wnd = tp->rcv_wnd;
	}
	bpf_sk_release(sk);
}

static __always_inline __u64 sum16(const void *b, int words)
{
	const __u16 *w = b;
	__u64 s = 0;
#pragma unroll
	for (int i = 0; i < words; i++)
		s += w[i];
	return s;
}

static __always_inline __u16 fold(__u64 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return ~(__u16)s;
}

struct synack_tcp {
	struct tcphdr th;
	__u8 opt[4]; /* MSS */
};

/*
 * synack turns the SYN in place into a SYN-ACK whose sequence number is a
 * syncookie, and returns XDP_TX. The frame keeps its L2 header (VLAN
 * tags included) with the MAC addresses swapped; the IP header is
 * rebuilt without options or extension headers.
 */
static __always_inline int synack(struct xdp_md *ctx, struct config *cfg, struct stats *st,
				  struct pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l3 = p->l3, l4 = p->l4;
	if (l3 > 22 || l4 > MAX_L4)
		return XDP_PASS;
	struct tcphdr *th = data + l4;
	if ((void *)(th + 1) > end)
		return XDP_DROP;
	__u32 thlen = (th->res_doff >> 4) * 4;
	barrier_var(thlen); /* keep the bounds check on the value passed on */
	if (thlen < sizeof(*th) || thlen > 60)
		return XDP_DROP;
	__u8 tbuf[60] = {};
	if (bpf_xdp_load_bytes(ctx, l4, tbuf, thlen))
		return XDP_DROP;
	__be16 sport = th->source, dport = th->dest;
	__u32 seq = bpf_ntohl(th->seq);
	__s64 c;
	if (p->v6) {
		struct ipv6hdr *ip6 = data + l3;
		if ((void *)(ip6 + 1) > end)
			return XDP_DROP;
		c = bpf_tcp_raw_gen_syncookie_ipv6(ip6, (struct tcphdr *)tbuf, thlen);
	} else {
		struct iphdr *ip = data + l3;
		if ((void *)(ip + 1) > end)
			return XDP_DROP;
		c = bpf_tcp_raw_gen_syncookie_ipv4(ip, (struct tcphdr *)tbuf, thlen);
	}
	if (c < 0) {
		st->c[CNT_ERRORS]++;
		return XDP_PASS;
	}
	__u32 cookie = (__u32)c;
	__u16 mss = (__u16)(c >> 32);

	__u32 iplen = p->v6 ? 40 : 20;
	__u32 optlen = 4;
	int cur = end - data;
	if (bpf_xdp_adjust_tail(ctx, (int)(l3 + iplen + 24) - cur)) {
		optlen = 0; /* no tailroom: answer without the MSS option */
		if (bpf_xdp_adjust_tail(ctx, (int)(l3 + iplen + 20) - cur)) {
			st->c[CNT_ERRORS]++;
			return XDP_PASS;
		}
	}
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;

	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return XDP_DROP;
	__u8 mac[6];
	__builtin_memcpy(mac, eth->h_dest, 6);
	__builtin_memcpy(eth->h_dest, eth->h_source, 6);
	__builtin_memcpy(eth->h_source, mac, 6);

	struct synack_tcp t = {};
	t.th.source = dport;
	t.th.dest = sport;
	t.th.seq = bpf_htonl(cookie);
	t.th.ack_seq = bpf_htonl(seq + 1);
	t.th.res_doff = (__u8)((20 + optlen) / 4) << 4;
	t.th.flags = TH_SYN | TH_ACK;
	t.th.window = bpf_htons((__u16)cfg->synack_window);
	t.opt[0] = 2; /* MSS */
	t.opt[1] = 4;
	t.opt[2] = mss >> 8;
	t.opt[3] = mss & 0xff;
	__u32 tcplen = 20 + optlen;

	__u64 sum = sum16(&p->src, 8) + sum16(&p->dst, 8);
	if (!p->v6) {
		struct iphdr ip = {};
		ip.version = 4;
		ip.ihl = 5;
		ip.tot_len = bpf_htons(20 + tcplen);
		ip.frag_off = bpf_htons(0x4000); /* DF */
		ip.ttl = 64;
		ip.protocol = IPPROTO_TCP;
		ip.saddr = p->dst[3];
		ip.daddr = p->src[3];
		ip.check = fold(sum16(&ip, 10));
		/* Pseudo header: only the IPv4 words count. */
		sum = sum16(&p->src[3], 2) + sum16(&p->dst[3], 2) + bpf_htons(IPPROTO_TCP) +
		      bpf_htons(tcplen);
		sum += sum16(&t, optlen ? 12 : 10);
		t.th.check = fold(sum);
		struct iphdr *oip = data + l3;
		if ((void *)oip + 40 > end)
			return XDP_DROP;
		__builtin_memcpy(oip, &ip, 20);
		__builtin_memcpy((void *)oip + 20, &t, 20);
		if (optlen) {
			if ((void *)oip + 44 > end)
				return XDP_DROP;
			__builtin_memcpy((void *)oip + 40, t.opt, 4);
		}
	} else {
		struct ipv6hdr ip6 = {};
		ip6.vtc = 0x60;
		ip6.payload_len = bpf_htons(tcplen);
		ip6.nexthdr = IPPROTO_TCP;
		ip6.hop_limit = 64;
		__builtin_memcpy(ip6.saddr, p->dst, 16);
		__builtin_memcpy(ip6.daddr, p->src, 16);
		sum += bpf_htons(tcplen) + bpf_htons(IPPROTO_TCP);
		sum += sum16(&t, optlen ? 12 : 10);
		t.th.check = fold(sum);
		struct ipv6hdr *oip6 = data + l3;
		if ((void *)oip6 + 60 > end)
			return XDP_DROP;
		__builtin_memcpy(oip6, &ip6, 40);
		__builtin_memcpy((void *)oip6 + 40, &t, 20);
		if (optlen) {
			if ((void *)oip6 + 64 > end)
				return XDP_DROP;
			__builtin_memcpy((void *)oip6 + 60, t.opt, 4);
		}
	}
	st->c[CNT_TX]++;
	return XDP_TX;
}

/* cookie_ok checks an ACK against the syncookie it should carry. */
static __always_inline int cookie_ok(void *data, void *end, struct pkt *p, struct tcphdr *th)
{
	__u32 l3 = p->l3;
	if (l3 > 22)
		return 0;
	if (p->v6) {
		struct ipv6hdr *ip6 = data + l3;
		if ((void *)(ip6 + 1) > end)
			return 0;
		return bpf_tcp_raw_check_syncookie_ipv6(ip6, th) == 0;
	}
	struct iphdr *ip = data + l3;
	if ((void *)(ip + 1) > end)
		return 0;
	return bpf_tcp_raw_check_syncookie_ipv4(ip, th) == 0;
}

static __always_inline int do_tcp(struct xdp_md *ctx, struct config *cfg, struct stats *st,
				  struct pkt *p, __u64 *now)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l4 = p->l4;
	if (l4 > MAX_L4)
		return XDP_DROP;
	struct tcphdr *th = data + l4;
	if ((void *)(th + 1) > end) {
		st->c[CNT_MALFORMED]++;
		return XDP_DROP;
	}
	__u32 doff = th->res_doff >> 4;
	if (doff < 5 || l4 + doff * 4 > p->l4end) {
		st->c[CNT_MALFORMED]++;
		return XDP_DROP;
	}
	__u8 fl = th->flags;
	__u32 f = cfg->flags;
	int defense = (f & F_DEFENSE) != 0;
	int proxy = (f & F_SYN_PROXY_ALWAYS) || ((f & F_SYN_PROXY) && defense);

	if ((fl & (TH_SYN | TH_ACK)) == TH_SYN) {
		if (fl & (TH_FIN | TH_RST)) {
			st->c[CNT_MALFORMED]++;
			return XDP_DROP;
		}
		st->c[CNT_SYN]++;
		if ((f & F_SYN_FLOOD || proxy) && allowed(cfg, st, p))
			return XDP_PASS;
		if (f & F_SYN_FLOOD) {
			__u32 lim = defense ? cfg->syn_limit_defense : cfg->syn_limit;
			if (bump(cfg, st, p, S_SYN, lim, now_ns(now))) {
				st->c[CNT_SYN_FLOOD]++;
				return XDP_DROP;
			}
		}
		if (!proxy)
			return XDP_PASS;
		/*
		 * One SYN per port every kernel_syn_ms goes to the kernel, which
		 * answers it with its own cookie (net.ipv4.tcp_syncookies=2).
		 * That keeps the listener's "recent overflow" stamp fresh, without
		 * which the kernel refuses cookie ACKs.
		 */
		__u32 port = bpf_ntohs(th->dest);
		__u64 *last = bpf_map_lookup_elem(&syn_sample, &port);
		if (last) {
			__u64 t = now_ns(now);
			if (t - *last >= (__u64)cfg->kernel_syn_ms * 1000000) {
				*last = t;
				st->c[CNT_KERNEL_SYN]++;
				return XDP_PASS;
			}
		}
		return synack(ctx, cfg, st, p);
	}

	if (fl & TH_RST) {
		if (!(f & F_RST_VALIDATE))
			return XDP_PASS;
		struct sock_info si = {};
		sock_lookup(ctx, p, th, &si);
		int valid;
		if (si.state < 0 || si.state == TCP_LISTEN)
			valid = 0; /* no connection to reset */
		else if (si.state == TCP_SYN_SENT || !si.full)
			valid = 1; /* the kernel checks the ACK field or a mini socket */
		else {
			__u32 wnd = si.rcv_wnd ? si.rcv_wnd : 1;
			valid = bpf_ntohl(th->seq) - si.rcv_nxt <= wnd;
		}
		if (valid || allowed(cfg, st, p))
			return XDP_PASS;
		bump(cfg, st, p, S_RST, cfg->rst_limit, now_ns(now));
		st->c[CNT_RST_INVALID]++;
		return XDP_DROP;
	}

	if ((fl & (TH_SYN | TH_ACK)) == TH_ACK && (proxy || (defense && (f & F_ACK_FLOOD)))) {
		struct flow_key k;
		flow_key(&k, p, th);
		if (bpf_map_lookup_elem(&conntrack, &k)) {
			st->c[CNT_FLOW_HIT]++;
			return XDP_PASS;
		}
		__u64 t = now_ns(now);
		if (cookie_ok(data, end, p, th)) {
			bpf_map_update_elem(&conntrack, &k, &t, BPF_ANY);
			st->c[CNT_COOKIE_OK]++;
			return XDP_PASS;
		}
		struct sock_info si = {};
		sock_lookup(ctx, p, th, &si);
		if (si.state >= 0 && si.state != TCP_LISTEN) {
			if (si.full)
				bpf_map_update_elem(&conntrack, &k, &t, BPF_ANY);
			return XDP_PASS;
		}
		if (allowed(cfg, st, p))
			return XDP_PASS;
		int over = 0;
		if (f & F_ACK_FLOOD)
			over = bump(cfg, st, p, S_ACK, cfg->ack_limit, t);
		if (proxy || over) {
			st->c[CNT_ACK_INVALID]++;
			return XDP_DROP;
		}
	}
	return XDP_PASS;
}

static __always_inline int do_udp(struct xdp_md *ctx, struct config *cfg, struct stats *st,
				  struct pkt *p, __u64 *now)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l4 = p->l4;
	if (l4 > MAX_L4)
		return XDP_DROP;
	struct udphdr *uh = data + l4;
	if ((void *)(uh + 1) > end || l4 + sizeof(*uh) > p->l4end) {
		st->c[CNT_MALFORMED]++;
		return XDP_DROP;
	}
	__u32 f = cfg->flags;
	if (!(f & (F_UDP_STATS | F_UDP_RATE_LIMIT)))
		return XDP_PASS;
	__u32 port = bpf_ntohs(uh->dest);
	__u64 bytes = p->l4end - p->l3;
	struct port_stats *ps = 0;
	if (f & F_UDP_STATS) {
		ps = bpf_map_lookup_elem(&port_stats, &port);
		if (ps) {
			ps->pkts++;
			ps->bytes += bytes;
		}
	}
	if (!(f & F_UDP_RATE_LIMIT))
		return XDP_PASS;
	struct udp_limit *lim = bpf_map_lookup_elem(&udp_limits, &port);
	if (!lim || (lim->pps == 0 && lim->bps == 0))
		return XDP_PASS;
	struct udp_state *us = bpf_map_lookup_elem(&udp_state, &port);
	if (!us)
		return XDP_PASS;
	__u64 t = now_ns(now);
	__u64 win = us->window;
	if (t - win >= NSEC) {
		/* Racy across CPUs, and harmless: a reset loses a few counts. */
		us->window = t;
		us->pkts = 0;
		us->bytes = 0;
		win = t;
	}
	__u64 n = __sync_fetch_and_add(&us->pkts, 1) + 1;
	__u64 b = __sync_fetch_and_add(&us->bytes, bytes) + bytes;
	if (((lim->pps && n > lim->pps) || (lim->bps && b > lim->bps)) && !allowed(cfg, st, p)) {
		if (us->over != win) {
			us->over = win;
			emit(cfg, st, EV_UDP_LIMIT, p, (__u16)port, (__u32)n, t);
		}
		if (ps)
			ps->drops++;
		st->c[CNT_UDP_LIMIT]++;
		return XDP_DROP;
	}
	return XDP_PASS;
}

static __always_inline int filter(struct xdp_md *ctx, struct config *cfg, struct stats *st)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct pkt p = {.allow = -1};
	__u64 now = 0;

	int r = parse(data, end, &p);
	if (r == P_OTHER)
		return XDP_PASS;
	if (r == P_MALFORMED) {
		st->c[CNT_MALFORMED]++;
		return XDP_DROP;
	}
	if (listed(cfg, &p, &deny, &deny_cidr4, &deny_cidr6, L_DENY, L_DENY4, L_DENY6, S_DENY_EXACT)) {
		if (allowed(cfg, st, &p))
			return XDP_PASS;
		st->c[CNT_DENY]++;
		return XDP_DROP;
	}
	if (p.frag) {
		if ((cfg->flags & F_DROP_FRAGMENTS) && !allowed(cfg, st, &p)) {
			st->c[CNT_FRAGMENT]++;
			return XDP_DROP;
		}
		if (p.later)
			return XDP_PASS; /* no L4 header to look at */
	}
	if (p.proto == IPPROTO_TCP)
		return do_tcp(ctx, cfg, st, &p, &now);
	if (p.proto == IPPROTO_UDP)
		return do_udp(ctx, cfg, st, &p, &now);
	return XDP_PASS;
}

SEC("xdp")
int bulwark_xdp(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct stats *st = bpf_map_lookup_elem(&stats, &zero);
	if (!cfg || !st)
		return XDP_PASS;
	st->c[CNT_RX]++;
	int v = filter(ctx, cfg, st);
	if (v == XDP_PASS)
		st->c[CNT_PASS]++;
	else if (v == XDP_DROP)
		st->c[CNT_DROP]++;
	return v;
}
