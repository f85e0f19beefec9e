package wire

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/vig-edge/vig/internal/fuzztest"
)

// scenarioE is the detector of SCENARIOS.md's scenario E as Triton would report
// it, with every field ParseModelConfig reads set.
var scenarioE = &ModelConfig{
	Name:         "detector",
	Platform:     "tensorrt_plan",
	Backend:      "tensorrt",
	MaxBatchSize: 8,
	Inputs:       []TensorConfig{{Name: "INPUT0", DataType: TypeUint8, Dims: []int64{1024}}},
	Outputs:      []TensorConfig{{Name: "OUTPUT0", DataType: TypeUint8, Dims: []int64{16}}, {Name: "names", DataType: TypeString, Dims: []int64{-1}}},
	InstanceGroups: []InstanceGroup{
		{Name: "detector_gpu", Kind: KindGPU, Count: 1, GPUs: []int32{0}},
		{Name: "detector_dla", Kind: KindGPU, Count: 2, SecondaryDevices: []SecondaryDevice{{Kind: KindNVDLA, DeviceID: 1}}},
	},
	DynamicBatching: &DynamicBatching{
		PreferredBatchSize: []int32{4, 8}, MaxQueueDelayMicroseconds: 100, PriorityLevels: 2, DefaultPriorityLevel: 2,
		DefaultQueuePolicy: &QueuePolicy{TimeoutAction: TimeoutDelay, DefaultTimeoutMicroseconds: 50000, AllowTimeoutOverride: true, MaxQueueSize: 1},
	},
}

func TestModelConfigRoundTrip(t *testing.T) {
	for _, c := range []*ModelConfig{
		scenarioE,
		{Name: "depth"}, // max_batch_size 0, no batcher
		{Name: "seq", MaxBatchSize: 4, SequenceBatching: true},
		{Name: "empty-batcher", MaxBatchSize: 8, DynamicBatching: &DynamicBatching{}},
		{Name: "neg", MaxBatchSize: -1, InstanceGroups: []InstanceGroup{{Kind: KindCPU, GPUs: []int32{-3}}}},
	} {
		got, err := ParseModelConfig(AppendModelConfig(nil, c))
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", c.Name, got, c)
		}
	}
}

// tag and helpers build fixtures by hand, with model_config.proto's numbers.
func tag(b []byte, num protowire.Number, typ protowire.Type) []byte {
	return protowire.AppendTag(b, num, typ)
}

func msg(num protowire.Number, m []byte) []byte {
	return protowire.AppendBytes(tag(nil, num, protowire.BytesType), m)
}

func vint(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(tag(nil, num, protowire.VarintType), v)
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func TestParseModelConfig(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want *ModelConfig
		err  string // substring of the error; "" for none
	}{
		{name: "empty", in: nil, want: &ModelConfig{}},
		{
			// Unpacked dims (a proto2-style writer), unknown fields of every wire
			// type skipped, max_batch_size 8, dynamic_batching {} present and empty.
			name: "unpacked and unknown",
			in: cat(msg(1, []byte("detector")), vint(4, 8),
				msg(5, cat(msg(1, []byte("INPUT0")), vint(2, 2), vint(4, 3), vint(4, 224), vint(3, 1))),
				protowire.AppendFixed32(tag(nil, 99, protowire.Fixed32Type), 7),
				protowire.AppendFixed64(tag(nil, 98, protowire.Fixed64Type), 7),
				msg(12, []byte{0x08, 0x01}), // optimization: not read
				msg(11, nil)),
			want: &ModelConfig{Name: "detector", MaxBatchSize: 8,
				Inputs:          []TensorConfig{{Name: "INPUT0", DataType: TypeUint8, Dims: []int64{3, 224}}},
				DynamicBatching: &DynamicBatching{}},
		},
		{
			name: "dims -1 packed as a 10-byte varint",
			in:   msg(6, cat(msg(1, []byte("OUTPUT0")), vint(2, 9), msg(3, protowire.AppendVarint(nil, ^uint64(0))))),
			want: &ModelConfig{Outputs: []TensorConfig{{Name: "OUTPUT0", DataType: TypeInt64, Dims: []int64{-1}}}},
		},
		{
			name: "sequence batcher",
			in:   cat(vint(4, 4), msg(13, []byte{0x08, 0x01})),
			want: &ModelConfig{MaxBatchSize: 4, SequenceBatching: true},
		},
		{
			name: "instance group on a DLA",
			in:   msg(7, cat(msg(1, []byte("d")), vint(4, 1), vint(2, 1), msg(8, cat(vint(1, 0), vint(2, 1))))),
			want: &ModelConfig{InstanceGroups: []InstanceGroup{{Name: "d", Kind: KindGPU, Count: 1,
				SecondaryDevices: []SecondaryDevice{{Kind: KindNVDLA, DeviceID: 1}}}}},
		},
		{
			name: "dynamic_batching twice merges",
			in:   cat(msg(11, vint(2, 100)), msg(11, msg(1, []byte{4, 8}))),
			want: &ModelConfig{DynamicBatching: &DynamicBatching{MaxQueueDelayMicroseconds: 100, PreferredBatchSize: []int32{4, 8}}},
		},
		{name: "truncated tag", in: []byte{0x80}, err: "ModelConfig: field tag"},
		{name: "truncated length", in: cat(tag(nil, 1, protowire.BytesType), []byte{5, 'a'}), err: "ModelConfig: field 1"},
		{name: "name as a varint", in: vint(1, 3), err: "ModelConfig.name: wrong wire type"},
		{name: "max_batch_size as bytes", in: msg(4, []byte{8}), err: "ModelConfig.max_batch_size: wrong wire type"},
		{name: "bad packed dims", in: msg(5, msg(4, []byte{0x80})), err: "ModelConfig.input.dims: packed values"},
		{name: "bad queue policy", in: msg(11, msg(6, vint(4, 1)[:1])), err: "dynamic_batching.default_queue_policy"},
		{name: "secondary device as varint", in: msg(7, vint(8, 1)), err: "instance_group.secondary_devices: wrong wire type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseModelConfig(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				if !strings.HasPrefix(err.Error(), "model config: ") {
					t.Errorf("error %q does not say what it was reading", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestDataTypeNames(t *testing.T) {
	for dt := TypeBool; dt <= TypeBF16; dt++ {
		if DataTypeOf(dt.Datatype()) != dt {
			t.Errorf("%d: %q does not map back", dt, dt.Datatype())
		}
	}
	if TypeString.Datatype() != "BYTES" || TypeUint8.Datatype() != "UINT8" || DataType(15).Datatype() != "" || DataTypeOf("NOPE") != TypeInvalid {
		t.Error("datatype names do not follow the protocol")
	}
}

// modelConfigDescriptor is the subset of Triton's model_config.proto that vig
// reads, as a descriptor with the proto's own names, types and numbers
// (triton-inference-server/common protobuf/model_config.proto), so that the
// protobuf runtime itself can encode and decode a ModelConfig for the tests.
func modelConfigDescriptor(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	type f = descriptorpb.FieldDescriptorProto
	field := func(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type, repeated bool, msgType string) *f {
		label := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
		if repeated {
			label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
		}
		fd := &f{Name: proto.String(name), Number: proto.Int32(num), Type: typ.Enum(), Label: label.Enum(), JsonName: proto.String(name)}
		if msgType != "" {
			fd.TypeName = proto.String(".inference." + msgType)
		}
		return fd
	}
	const (
		str   = descriptorpb.FieldDescriptorProto_TYPE_STRING
		i32   = descriptorpb.FieldDescriptorProto_TYPE_INT32
		i64   = descriptorpb.FieldDescriptorProto_TYPE_INT64
		u32   = descriptorpb.FieldDescriptorProto_TYPE_UINT32
		u64   = descriptorpb.FieldDescriptorProto_TYPE_UINT64
		boolT = descriptorpb.FieldDescriptorProto_TYPE_BOOL
		m     = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	)
	// Enums are declared as int32 here: the wire encoding is the same varint.
	msgs := []*descriptorpb.DescriptorProto{
		{Name: proto.String("ModelInput"), Field: []*f{field("name", 1, str, false, ""), field("data_type", 2, i32, false, ""), field("dims", 4, i64, true, "")}},
		{Name: proto.String("ModelOutput"), Field: []*f{field("name", 1, str, false, ""), field("data_type", 2, i32, false, ""), field("dims", 3, i64, true, "")}},
		{Name: proto.String("SecondaryDevice"), Field: []*f{field("kind", 1, i32, false, ""), field("device_id", 2, i64, false, "")}},
		{Name: proto.String("ModelInstanceGroup"), Field: []*f{field("name", 1, str, false, ""), field("count", 2, i32, false, ""),
			field("gpus", 3, i32, true, ""), field("kind", 4, i32, false, ""), field("secondary_devices", 8, m, true, "SecondaryDevice")}},
		{Name: proto.String("ModelQueuePolicy"), Field: []*f{field("timeout_action", 1, i32, false, ""), field("default_timeout_microseconds", 2, u64, false, ""),
			field("allow_timeout_override", 3, boolT, false, ""), field("max_queue_size", 4, u32, false, "")}},
		{Name: proto.String("ModelDynamicBatching"), Field: []*f{field("preferred_batch_size", 1, i32, true, ""), field("max_queue_delay_microseconds", 2, u64, false, ""),
			field("priority_levels", 4, u64, false, ""), field("default_priority_level", 5, u64, false, ""), field("default_queue_policy", 6, m, false, "ModelQueuePolicy")}},
		{Name: proto.String("ModelSequenceBatching")},
		{Name: proto.String("ModelConfig"), Field: []*f{field("name", 1, str, false, ""), field("platform", 2, str, false, ""), field("max_batch_size", 4, i32, false, ""),
			field("input", 5, m, true, "ModelInput"), field("output", 6, m, true, "ModelOutput"), field("instance_group", 7, m, true, "ModelInstanceGroup"),
			field("dynamic_batching", 11, m, false, "ModelDynamicBatching"), field("sequence_batching", 13, m, false, "ModelSequenceBatching"), field("backend", 17, str, false, "")}},
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("model_config_subset.proto"), Package: proto.String("inference"), Syntax: proto.String("proto3"), MessageType: msgs,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().ByName("ModelConfig")
}

// TestModelConfigFromProtobuf has the protobuf runtime decode what
// AppendModelConfig wrote and encode it again in its own way: ParseModelConfig
// reads the runtime's bytes back to the same configuration.
func TestModelConfigFromProtobuf(t *testing.T) {
	desc := modelConfigDescriptor(t)
	for _, c := range []*ModelConfig{scenarioE, {Name: "seq", MaxBatchSize: 4, SequenceBatching: true}} {
		dm := dynamicpb.NewMessage(desc)
		if err := proto.Unmarshal(AppendModelConfig(nil, c), dm); err != nil {
			t.Fatalf("protobuf rejects AppendModelConfig's bytes: %v", err)
		}
		if got := dm.Get(desc.Fields().ByName("max_batch_size")).Int(); got != int64(c.MaxBatchSize) {
			t.Errorf("protobuf reads max_batch_size %d, want %d", got, c.MaxBatchSize)
		}
		if got := dm.Has(desc.Fields().ByName("sequence_batching")); got != c.SequenceBatching {
			t.Errorf("protobuf reads sequence_batching present=%v, want %v", got, c.SequenceBatching)
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(dm)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseModelConfig(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("from protobuf's bytes\n got %+v\nwant %+v", got, c)
		}
	}
}

// FuzzParseModelConfig checks, for any bytes: no panic; what decodes encodes to
// bytes that decode to the same configuration.
func FuzzParseModelConfig(f *testing.F) {
	f.Add(AppendModelConfig(nil, scenarioE))
	f.Add(AppendModelConfig(nil, &ModelConfig{Name: "seq", SequenceBatching: true}))
	f.Add(cat(msg(5, cat(vint(4, 3), vint(4, 224))), msg(11, msg(6, vint(4, 1)))))
	f.Fuzz(func(t *testing.T, b []byte) {
		defer fuzztest.Bound(t)()
		c, err := ParseModelConfig(b)
		if err != nil {
			return
		}
		again, err := ParseModelConfig(AppendModelConfig(nil, c))
		if err != nil {
			t.Fatalf("re-encoded config does not decode: %v", err)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("re-encoded config differs\n got %+v\nwant %+v", again, c)
		}
	})
}
