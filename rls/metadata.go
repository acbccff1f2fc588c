package rls

import (
	"fmt"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// responseMetadata is the answer's dynamic_metadata with
// Settings.ResponseMetadata, in envoyproxy/ratelimit's shape: domain,
// descriptors (entries as "key=value", the limit override, hitsAddend),
// the request's hitsAddend when set, the indexes of the descriptors over
// their limit in quota_mode (quotaModeViolations, when any) and whether
// any limit applied is in quota_mode (quotaModeEnabled).
func responseMetadata(req *pb.RateLimitRequest, ts []target, violations []int) *structpb.Struct {
	descs := make([]*structpb.Value, 0, len(req.Descriptors))
	for _, d := range req.Descriptors {
		entries := make([]*structpb.Value, len(d.Entries))
		for i, e := range d.Entries {
			entries[i] = structpb.NewStringValue(e.Key + "=" + e.Value)
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if l := d.Limit; l != nil {
			f["limit"] = structpb.NewStringValue(fmt.Sprintf("requests_per_unit:%d unit:%s", l.RequestsPerUnit, l.Unit))
		}
		if h := d.HitsAddend; h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.Value))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	f := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.Domain),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if req.HitsAddend != 0 {
		f["hitsAddend"] = structpb.NewNumberValue(float64(req.HitsAddend))
	}
	if len(violations) > 0 {
		v := make([]*structpb.Value, len(violations))
		for i, x := range violations {
			v[i] = structpb.NewNumberValue(float64(x))
		}
		f["quotaModeViolations"] = structpb.NewListValue(&structpb.ListValue{Values: v})
	}
	quota := false
	for _, t := range ts {
		quota = quota || t.r != nil && !t.r.unlimited && t.r.quota
	}
	f["quotaModeEnabled"] = structpb.NewBoolValue(quota)
	return &structpb.Struct{Fields: f}
}
