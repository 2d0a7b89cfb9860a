package pve

import "fmt"

// decodeResourcesBody is what Resources does with a successful answer's body.
func decodeResourcesBody(body []byte) ([]Resource, error) {
	var w []resourceWire
	_, envErr, dataErr := decodeAnswer(body, &w)
	if envErr != nil {
		return nil, envErr
	}
	if dataErr != nil {
		return nil, fmt.Errorf("data: %w", dataErr)
	}
	return resourcesFromWire(w), nil
}
