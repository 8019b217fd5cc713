package kubelet

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// listMethod is PodResourcesLister.List of the kubelet's pod-resources
// API, version v1 (k8s.io/kubelet/pkg/apis/podresources/v1/api.proto).
const listMethod = "/v1.PodResourcesLister/List"

// The parts of ListPodResourcesResponse the exporter reads. Everything
// else (CPU IDs, memory, topology, dynamic resources) is skipped as
// protobuf skips unknown fields.
type (
	podResources struct {
		Name, Namespace string
		Containers      []containerResources
	}
	containerResources struct {
		Name    string
		Devices []containerDevices
	}
	containerDevices struct {
		ResourceName string
		DeviceIDs    []string
	}
)

// decodeList decodes a ListPodResourcesResponse:
//
//	ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
//	PodResources { string name = 1; string namespace = 2; repeated ContainerResources containers = 3; }
//	ContainerResources { string name = 1; repeated ContainerDevices devices = 2; ... }
//	ContainerDevices { string resource_name = 1; repeated string device_ids = 2; ... }
func decodeList(b []byte) ([]podResources, error) {
	var pods []podResources
	err := eachField(b, "ListPodResourcesResponse", func(num protowire.Number, v []byte) error {
		if num != 1 {
			return nil
		}
		var p podResources
		err := eachField(v, "PodResources", func(num protowire.Number, v []byte) error {
			switch num {
			case 1:
				return str(&p.Name, v, "PodResources.name")
			case 2:
				return str(&p.Namespace, v, "PodResources.namespace")
			case 3:
				c, err := decodeContainer(v)
				p.Containers = append(p.Containers, c)
				return err
			}
			return nil
		})
		pods = append(pods, p)
		return err
	})
	return pods, err
}

func decodeContainer(b []byte) (containerResources, error) {
	var c containerResources
	err := eachField(b, "ContainerResources", func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			return str(&c.Name, v, "ContainerResources.name")
		case 2:
			var d containerDevices
			err := eachField(v, "ContainerDevices", func(num protowire.Number, v []byte) error {
				switch num {
				case 1:
					return str(&d.ResourceName, v, "ContainerDevices.resource_name")
				case 2:
					var id string
					err := str(&id, v, "ContainerDevices.device_ids")
					d.DeviceIDs = append(d.DeviceIDs, id)
					return err
				}
				return nil
			})
			c.Devices = append(c.Devices, d)
			return err
		}
		return nil
	})
	return c, err
}

// eachField calls f with the number and contents of every length-delimited
// field of the message b (strings, bytes and messages: all this API's
// fields that the exporter reads). Fields of other wire types are
// skipped, as unknown fields are.
func eachField(b []byte, message string, f func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%s: field tag: %w", message, protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("%s: field %d: %w", message, num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("%s: field %d: %w", message, num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}

// str sets *s to v, which must be UTF-8 as proto3 strings are.
func str(s *string, v []byte, field string) error {
	if !utf8.Valid(v) {
		return fmt.Errorf("%s is not valid UTF-8: %q", field, v)
	}
	*s = string(v)
	return nil
}
