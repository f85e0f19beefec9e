package wire

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// ModelConfig is the part of a Triton server's model configuration vig reads: the
// bytes of ModelConfigResponse.config (field 1), a ModelConfig message of Triton's
// model_config.proto. Field numbers below are from
// triton-inference-server/common, protobuf/model_config.proto (2018-2024 edition):
// each is written beside the field it decodes. Fields vig does not read are
// skipped, as a protobuf parser skips unknown fields.
type ModelConfig struct {
	Name     string // ModelConfig.name = 1
	Platform string // ModelConfig.platform = 2
	Backend  string // ModelConfig.backend = 17
	// MaxBatchSize is the most rows one request (or one batch the server forms)
	// may carry; 0: the model takes no batch dimension (ModelConfig.max_batch_size = 4).
	MaxBatchSize   int32
	Inputs         []TensorConfig  // ModelConfig.input = 5 (ModelInput)
	Outputs        []TensorConfig  // ModelConfig.output = 6 (ModelOutput)
	InstanceGroups []InstanceGroup // ModelConfig.instance_group = 7
	// DynamicBatching is set when the model declares Triton's dynamic batcher
	// (ModelConfig.dynamic_batching = 11, in the oneof scheduling_choice).
	DynamicBatching *DynamicBatching
	// SequenceBatching says the model declares a sequence batcher
	// (ModelConfig.sequence_batching = 13): its requests belong to sequences and
	// must not be merged by anyone else.
	SequenceBatching bool
}

// TensorConfig is a ModelInput or ModelOutput: name = 1, data_type = 2 in both;
// dims = 4 in ModelInput, 3 in ModelOutput. Dims exclude the batch dimension when
// MaxBatchSize > 0; -1 is a variable dimension.
type TensorConfig struct {
	Name     string
	DataType DataType
	Dims     []int64
}

// DataType is model_config.proto's enum DataType (TYPE_BOOL = 1 … TYPE_BF16 = 14).
type DataType int32

// The data types, numbered as in model_config.proto's enum DataType.
const (
	TypeInvalid DataType = 0
	TypeBool    DataType = 1
	TypeUint8   DataType = 2
	TypeUint16  DataType = 3
	TypeUint32  DataType = 4
	TypeUint64  DataType = 5
	TypeInt8    DataType = 6
	TypeInt16   DataType = 7
	TypeInt32   DataType = 8
	TypeInt64   DataType = 9
	TypeFP16    DataType = 10
	TypeFP32    DataType = 11
	TypeFP64    DataType = 12
	TypeString  DataType = 13
	TypeBF16    DataType = 14
)

var datatypeNames = [...]string{"", "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES", "BF16"}

// Datatype is the type's name in the inference protocol ("UINT8", "BYTES"), or ""
// for TYPE_INVALID and numbers model_config.proto does not define.
func (t DataType) Datatype() string {
	if t < 0 || int(t) >= len(datatypeNames) {
		return ""
	}
	return datatypeNames[t]
}

// DataTypeOf is the DataType of a protocol datatype name; TypeInvalid for an
// unknown name.
func DataTypeOf(datatype string) DataType {
	for i, n := range datatypeNames {
		if n == datatype && n != "" {
			return DataType(i)
		}
	}
	return TypeInvalid
}

// InstanceKind is ModelInstanceGroup.Kind.
type InstanceKind int32

// model_config.proto: ModelInstanceGroup.Kind.
const (
	KindAuto  InstanceKind = 0
	KindGPU   InstanceKind = 1
	KindCPU   InstanceKind = 2
	KindModel InstanceKind = 3
)

func (k InstanceKind) String() string {
	switch k {
	case KindAuto:
		return "KIND_AUTO"
	case KindGPU:
		return "KIND_GPU"
	case KindCPU:
		return "KIND_CPU"
	case KindModel:
		return "KIND_MODEL"
	}
	return fmt.Sprintf("KIND_%d", int32(k))
}

// InstanceGroup is a ModelInstanceGroup.
type InstanceGroup struct {
	Name             string            // name = 1
	Kind             InstanceKind      // kind = 4
	Count            int32             // count = 2 (Triton's default when absent: 1)
	GPUs             []int32           // gpus = 3
	SecondaryDevices []SecondaryDevice // secondary_devices = 8
}

// SecondaryDevice is ModelInstanceGroup.SecondaryDevice: kind = 1, device_id = 2.
type SecondaryDevice struct {
	Kind     SecondaryDeviceKind
	DeviceID int64
}

// SecondaryDeviceKind is SecondaryDevice.SecondaryDeviceKind.
type SecondaryDeviceKind int32

// KindNVDLA is an NVDLA core (SecondaryDeviceKind KIND_NVDLA = 0).
const KindNVDLA SecondaryDeviceKind = 0

// DynamicBatching is ModelDynamicBatching.
type DynamicBatching struct {
	PreferredBatchSize        []int32      // preferred_batch_size = 1
	MaxQueueDelayMicroseconds uint64       // max_queue_delay_microseconds = 2
	PriorityLevels            uint64       // priority_levels = 4
	DefaultPriorityLevel      uint64       // default_priority_level = 5
	DefaultQueuePolicy        *QueuePolicy // default_queue_policy = 6
}

// QueuePolicy is ModelQueuePolicy.
type QueuePolicy struct {
	TimeoutAction              TimeoutAction // timeout_action = 1
	DefaultTimeoutMicroseconds uint64        // default_timeout_microseconds = 2
	AllowTimeoutOverride       bool          // allow_timeout_override = 3
	MaxQueueSize               uint32        // max_queue_size = 4
}

// TimeoutAction is ModelQueuePolicy.TimeoutAction: REJECT = 0, DELAY = 1.
type TimeoutAction int32

// The timeout actions of model_config.proto.
const (
	TimeoutReject TimeoutAction = 0
	TimeoutDelay  TimeoutAction = 1
)

// Field numbers of model_config.proto (triton-inference-server/common,
// protobuf/model_config.proto).
const (
	mcName             = 1  // ModelConfig.name
	mcPlatform         = 2  // ModelConfig.platform
	mcMaxBatchSize     = 4  // ModelConfig.max_batch_size
	mcInput            = 5  // ModelConfig.input
	mcOutput           = 6  // ModelConfig.output
	mcInstanceGroup    = 7  // ModelConfig.instance_group
	mcDynamicBatching  = 11 // ModelConfig.dynamic_batching
	mcSequenceBatching = 13 // ModelConfig.sequence_batching
	mcBackend          = 17 // ModelConfig.backend

	tensorName     = 1 // ModelInput.name, ModelOutput.name
	tensorDataType = 2 // ModelInput.data_type, ModelOutput.data_type
	inputDims      = 4 // ModelInput.dims
	outputDims     = 3 // ModelOutput.dims

	igName             = 1 // ModelInstanceGroup.name
	igCount            = 2 // ModelInstanceGroup.count
	igGPUs             = 3 // ModelInstanceGroup.gpus
	igKind             = 4 // ModelInstanceGroup.kind
	igSecondaryDevices = 8 // ModelInstanceGroup.secondary_devices

	sdKind     = 1 // SecondaryDevice.kind
	sdDeviceID = 2 // SecondaryDevice.device_id

	dbPreferredBatchSize   = 1 // ModelDynamicBatching.preferred_batch_size
	dbMaxQueueDelay        = 2 // ModelDynamicBatching.max_queue_delay_microseconds
	dbPriorityLevels       = 4 // ModelDynamicBatching.priority_levels
	dbDefaultPriorityLevel = 5 // ModelDynamicBatching.default_priority_level
	dbDefaultQueuePolicy   = 6 // ModelDynamicBatching.default_queue_policy

	qpTimeoutAction  = 1 // ModelQueuePolicy.timeout_action
	qpDefaultTimeout = 2 // ModelQueuePolicy.default_timeout_microseconds
	qpAllowOverride  = 3 // ModelQueuePolicy.allow_timeout_override
	qpMaxQueueSize   = 4 // ModelQueuePolicy.max_queue_size
)

var errTruncated = errors.New("truncated or malformed protobuf")

// ParseModelConfig decodes a ModelConfig message (the bytes of
// ModelConfigResponse.config). Unknown fields are skipped; a known field with the
// wrong wire type or malformed bytes is an error naming the field. Repeated
// scalars are read packed or unpacked, as protobuf parsers must; a message field
// that occurs twice is merged, as protobuf merges it.
func ParseModelConfig(b []byte) (*ModelConfig, error) {
	c := &ModelConfig{}
	err := fields(b, "ModelConfig", func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		var err error
		switch num {
		case mcName:
			c.Name, err = str(typ, v, "name")
		case mcPlatform:
			c.Platform, err = str(typ, v, "platform")
		case mcBackend:
			c.Backend, err = str(typ, v, "backend")
		case mcMaxBatchSize:
			var u uint64
			u, err = varint(typ, x, "max_batch_size")
			c.MaxBatchSize = int32(u)
		case mcInput, mcOutput:
			name, dims := "input", protowire.Number(inputDims)
			if num == mcOutput {
				name, dims = "output", outputDims
			}
			if typ != protowire.BytesType {
				return wrongType(name)
			}
			var t TensorConfig
			if t, err = parseTensor(v, name, dims); err == nil {
				if num == mcInput {
					c.Inputs = append(c.Inputs, t)
				} else {
					c.Outputs = append(c.Outputs, t)
				}
			}
		case mcInstanceGroup:
			if typ != protowire.BytesType {
				return wrongType("instance_group")
			}
			var g InstanceGroup
			if g, err = parseInstanceGroup(v); err == nil {
				c.InstanceGroups = append(c.InstanceGroups, g)
			}
		case mcDynamicBatching:
			if typ != protowire.BytesType {
				return wrongType("dynamic_batching")
			}
			if c.DynamicBatching == nil {
				c.DynamicBatching = &DynamicBatching{}
			}
			err = parseDynamicBatching(v, c.DynamicBatching)
		case mcSequenceBatching:
			if typ != protowire.BytesType {
				return wrongType("sequence_batching")
			}
			c.SequenceBatching = true
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("model config: %w", err)
	}
	return c, nil
}

// fields calls f for every field of the message in b: v holds a length-delimited
// field's bytes, x a varint's value (fixed-width and group fields are skipped
// unread: no field vig reads has those types).
func fields(b []byte, msg string, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%s: field tag: %w", msg, errTruncated)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%s: field %d: %w", msg, num, errTruncated)
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return fmt.Errorf("%s.%w", msg, err)
		}
	}
	return nil
}

func wrongType(field string) error {
	return fmt.Errorf("%s: wrong wire type (is this Triton's model_config.proto?)", field)
}

func str(typ protowire.Type, v []byte, field string) (string, error) {
	if typ != protowire.BytesType {
		return "", wrongType(field)
	}
	return string(v), nil
}

func varint(typ protowire.Type, x uint64, field string) (uint64, error) {
	if typ != protowire.VarintType {
		return 0, wrongType(field)
	}
	return x, nil
}

// repeatedVarint appends a repeated integer field's values, packed (one
// length-delimited run) or not (one varint).
func repeatedVarint(out []uint64, typ protowire.Type, v []byte, x uint64, field string) ([]uint64, error) {
	switch typ {
	case protowire.VarintType:
		return append(out, x), nil
	case protowire.BytesType:
		for len(v) > 0 {
			u, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return out, fmt.Errorf("%s: packed values: %w", field, errTruncated)
			}
			out = append(out, u)
			v = v[n:]
		}
		return out, nil
	}
	return out, wrongType(field)
}

func parseTensor(b []byte, field string, dimsNum protowire.Number) (TensorConfig, error) {
	var t TensorConfig
	var dims []uint64
	err := fields(b, field, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		var err error
		switch num {
		case tensorName:
			t.Name, err = str(typ, v, "name")
		case tensorDataType:
			var u uint64
			u, err = varint(typ, x, "data_type")
			t.DataType = DataType(int32(u))
		case dimsNum:
			dims, err = repeatedVarint(dims, typ, v, x, "dims")
		}
		return err
	})
	for _, d := range dims {
		t.Dims = append(t.Dims, int64(d))
	}
	return t, err
}

func parseInstanceGroup(b []byte) (InstanceGroup, error) {
	var g InstanceGroup
	var gpus []uint64
	err := fields(b, "instance_group", func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		var err error
		var u uint64
		switch num {
		case igName:
			g.Name, err = str(typ, v, "name")
		case igKind:
			u, err = varint(typ, x, "kind")
			g.Kind = InstanceKind(int32(u))
		case igCount:
			u, err = varint(typ, x, "count")
			g.Count = int32(u)
		case igGPUs:
			gpus, err = repeatedVarint(gpus, typ, v, x, "gpus")
		case igSecondaryDevices:
			if typ != protowire.BytesType {
				return wrongType("secondary_devices")
			}
			var d SecondaryDevice
			err = fields(v, "secondary_devices", func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
				var err error
				var u uint64
				switch num {
				case sdKind:
					u, err = varint(typ, x, "kind")
					d.Kind = SecondaryDeviceKind(int32(u))
				case sdDeviceID:
					u, err = varint(typ, x, "device_id")
					d.DeviceID = int64(u)
				}
				return err
			})
			g.SecondaryDevices = append(g.SecondaryDevices, d)
		}
		return err
	})
	for _, u := range gpus {
		g.GPUs = append(g.GPUs, int32(u))
	}
	return g, err
}

func parseDynamicBatching(b []byte, d *DynamicBatching) error {
	var pref []uint64
	err := fields(b, "dynamic_batching", func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		var err error
		switch num {
		case dbPreferredBatchSize:
			pref, err = repeatedVarint(pref, typ, v, x, "preferred_batch_size")
		case dbMaxQueueDelay:
			d.MaxQueueDelayMicroseconds, err = varint(typ, x, "max_queue_delay_microseconds")
		case dbPriorityLevels:
			d.PriorityLevels, err = varint(typ, x, "priority_levels")
		case dbDefaultPriorityLevel:
			d.DefaultPriorityLevel, err = varint(typ, x, "default_priority_level")
		case dbDefaultQueuePolicy:
			if typ != protowire.BytesType {
				return wrongType("default_queue_policy")
			}
			if d.DefaultQueuePolicy == nil {
				d.DefaultQueuePolicy = &QueuePolicy{}
			}
			err = parseQueuePolicy(v, d.DefaultQueuePolicy)
		}
		return err
	})
	for _, u := range pref {
		d.PreferredBatchSize = append(d.PreferredBatchSize, int32(u))
	}
	return err
}

func parseQueuePolicy(b []byte, q *QueuePolicy) error {
	return fields(b, "default_queue_policy", func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
		var err error
		var u uint64
		switch num {
		case qpTimeoutAction:
			u, err = varint(typ, x, "timeout_action")
			q.TimeoutAction = TimeoutAction(int32(u))
		case qpDefaultTimeout:
			q.DefaultTimeoutMicroseconds, err = varint(typ, x, "default_timeout_microseconds")
		case qpAllowOverride:
			u, err = varint(typ, x, "allow_timeout_override")
			q.AllowTimeoutOverride = u != 0
		case qpMaxQueueSize:
			u, err = varint(typ, x, "max_queue_size")
			q.MaxQueueSize = uint32(u)
		}
		return err
	})
}

// AppendModelConfig appends c encoded as a ModelConfig message: deterministic
// bytes, fields in number order within each message, zero scalars omitted and
// repeated integers packed (proto3's encoding). A DynamicBatching that is set
// but empty and SequenceBatching are encoded as present, empty messages.
func AppendModelConfig(b []byte, c *ModelConfig) []byte {
	b = appendString(b, mcName, c.Name)
	b = appendString(b, mcPlatform, c.Platform)
	b = appendVarint(b, mcMaxBatchSize, uint64(int64(c.MaxBatchSize)))
	for _, t := range c.Inputs {
		b = appendMessage(b, mcInput, appendTensor(nil, t, inputDims))
	}
	for _, t := range c.Outputs {
		b = appendMessage(b, mcOutput, appendTensor(nil, t, outputDims))
	}
	for _, g := range c.InstanceGroups {
		b = appendMessage(b, mcInstanceGroup, appendInstanceGroup(nil, g))
	}
	if d := c.DynamicBatching; d != nil {
		var m []byte
		m = appendPackedField(m, dbPreferredBatchSize, int32s(d.PreferredBatchSize))
		m = appendVarint(m, dbMaxQueueDelay, d.MaxQueueDelayMicroseconds)
		m = appendVarint(m, dbPriorityLevels, d.PriorityLevels)
		m = appendVarint(m, dbDefaultPriorityLevel, d.DefaultPriorityLevel)
		if q := d.DefaultQueuePolicy; q != nil {
			var p []byte
			p = appendVarint(p, qpTimeoutAction, uint64(int64(q.TimeoutAction)))
			p = appendVarint(p, qpDefaultTimeout, q.DefaultTimeoutMicroseconds)
			if q.AllowTimeoutOverride {
				p = appendVarint(p, qpAllowOverride, 1)
			}
			p = appendVarint(p, qpMaxQueueSize, uint64(q.MaxQueueSize))
			m = appendMessage(m, dbDefaultQueuePolicy, p)
		}
		b = appendMessage(b, mcDynamicBatching, m)
	}
	if c.SequenceBatching {
		b = appendMessage(b, mcSequenceBatching, nil)
	}
	b = appendString(b, mcBackend, c.Backend)
	return b
}

func appendTensor(b []byte, t TensorConfig, dimsNum protowire.Number) []byte {
	b = appendString(b, tensorName, t.Name)
	b = appendVarint(b, tensorDataType, uint64(int64(t.DataType)))
	dims := make([]uint64, len(t.Dims))
	for i, d := range t.Dims {
		dims[i] = uint64(d)
	}
	return appendPackedField(b, dimsNum, dims)
}

func appendInstanceGroup(b []byte, g InstanceGroup) []byte {
	b = appendString(b, igName, g.Name)
	b = appendVarint(b, igCount, uint64(int64(g.Count)))
	b = appendPackedField(b, igGPUs, int32s(g.GPUs))
	b = appendVarint(b, igKind, uint64(int64(g.Kind)))
	for _, d := range g.SecondaryDevices {
		var m []byte
		m = appendVarint(m, sdKind, uint64(int64(d.Kind)))
		m = appendVarint(m, sdDeviceID, uint64(d.DeviceID))
		b = appendMessage(b, igSecondaryDevices, m)
	}
	return b
}

// int32s widens as protobuf encodes an int32: sign-extended to 64 bits.
func int32s(v []int32) []uint64 {
	out := make([]uint64, len(v))
	for i, x := range v {
		out[i] = uint64(int64(x))
	}
	return out
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendMessage(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

func appendPackedField(b []byte, num protowire.Number, v []uint64) []byte {
	if len(v) == 0 {
		return b
	}
	var p []byte
	for _, x := range v {
		p = protowire.AppendVarint(p, x)
	}
	return appendMessage(b, num, p)
}
